// gelu, gelu_backward, silu, silu_backward (see kernels/cpu/nn/nn_ops.h).
//
//   gelu(x), approximate="none": 0.5 x (1 + erf(x / sqrt 2))
//   gelu(x), approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   silu(x) = x * sigmoid(x)
// The *_backward ops take (dy, x) and return dx = dy * f'(x).
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/cpu/nn/common.h"

namespace loom::kernels::cpu::nn::internal {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluC = 0.044715;

absl::StatusOr<bool> GeluIsTanh(const Attrs& a) {
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "approximate", AttrKind::kString));
  std::string s = a.GetString("approximate", "none");
  if (s == "tanh") return true;
  if (s == "none") return false;
  return absl::InvalidArgumentError(absl::StrCat("approximate: expected \"tanh\" or \"none\", got \"", s, "\""));
}

// ---- Inference ----
absl::StatusOr<std::vector<TensorMeta>> InferUnary(absl::Span<const TensorMeta> in, const Attrs&) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "x"));
  return std::vector<TensorMeta>{in[0]};
}

absl::StatusOr<std::vector<TensorMeta>> InferUnaryBackward(absl::Span<const TensorMeta> in, const Attrs&) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "dy"));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[1], "x"));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in[0], "dy", in[1], "x"));
  LOOM_RETURN_IF_ERROR(ExpectSameShape(in[0], "dy", in[1], "x"));
  return std::vector<TensorMeta>{in[1]};
}

absl::StatusOr<std::vector<TensorMeta>> InferGelu(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(GeluIsTanh(a).status());
  return InferUnary(in, a);
}
absl::StatusOr<std::vector<TensorMeta>> InferGeluBackward(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(GeluIsTanh(a).status());
  return InferUnaryBackward(in, a);
}

// ---- Scalar math in double (reference) ----
double GeluRef(double x, bool tanh_approx) {
  if (tanh_approx) return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + kGeluC * x * x * x)));
  return 0.5 * x * (1 + std::erf(x * kInvSqrt2));
}
double GeluGradRef(double x, bool tanh_approx) {
  if (tanh_approx) {
    double u = kSqrt2OverPi * (x + kGeluC * x * x * x);
    double t = std::tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kGeluC * x * x);
  }
  return 0.5 * (1 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}
double SiluRef(double x) { return x / (1 + std::exp(-x)); }
double SiluGradRef(double x) {
  double s = 1 / (1 + std::exp(-x));
  return s * (1 + x * (1 - s));
}

// Elementwise reference: out[i] = f(x[i]) or dy[i] * f(x[i]) when `with_dy`.
template <typename F>
absl::Status RefMap(absl::Span<const Tensor> in, absl::Span<Tensor> out, bool with_dy, F f) {
  Tensor x = AsF64(in[with_dy ? 1 : 0]);
  Tensor y = NewF64(x.shape());
  const double* px = x.data<double>();
  double* py = y.data<double>();
  if (with_dy) {
    Tensor dy = AsF64(in[0]);
    const double* pd = dy.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = pd[i] * f(px[i]);
  } else {
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = f(px[i]);
  }
  return Store(out[0], y);
}

// ---- Fast f32 kernels ----
template <typename F>
void ParallelMap(int64_t n, F f) {
  ParallelFor(n, 8192, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) f(i);
  });
}

inline float GeluTanhF(float x) {
  const float k = static_cast<float>(kSqrt2OverPi), c = static_cast<float>(kGeluC);
  return 0.5f * x * (1.0f + FastTanh(k * (x + c * x * x * x)));
}
inline float GeluTanhGradF(float x) {
  const float k = static_cast<float>(kSqrt2OverPi), c = static_cast<float>(kGeluC);
  float t = FastTanh(k * (x + c * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
}
inline float SiluF(float x) { return x / (1.0f + FastExp(-x)); }
inline float SiluGradF(float x) {
  float s = 1.0f / (1.0f + FastExp(-x));
  return s * (1.0f + x * (1.0f - s));
}

absl::Status GeluKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  LOOM_ASSIGN_OR_RETURN(bool tanh_approx, GeluIsTanh(a));
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  if (tanh_approx) {
    ParallelMap(in[0].numel(), [&](int64_t i) { y[i] = GeluTanhF(x[i]); });
  } else {
    // erf has no vectorised form here; the loop still runs row-parallel.
    ParallelMap(in[0].numel(), [&](int64_t i) {
      y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(kInvSqrt2)));
    });
  }
  return absl::OkStatus();
}

absl::Status GeluBackwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  LOOM_ASSIGN_OR_RETURN(bool tanh_approx, GeluIsTanh(a));
  const float* dy = in[0].data<float>();
  const float* x = in[1].data<float>();
  float* dx = out[0].data<float>();
  if (tanh_approx) {
    ParallelMap(in[1].numel(), [&](int64_t i) { dx[i] = dy[i] * GeluTanhGradF(x[i]); });
  } else {
    ParallelMap(in[1].numel(), [&](int64_t i) {
      float v = x[i];
      float g = 0.5f * (1.0f + std::erf(v * static_cast<float>(kInvSqrt2))) +
                v * static_cast<float>(kInvSqrt2Pi) * FastExp(-0.5f * v * v);
      dx[i] = dy[i] * g;
    });
  }
  return absl::OkStatus();
}

absl::Status SiluKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  ParallelMap(in[0].numel(), [&](int64_t i) { y[i] = SiluF(x[i]); });
  return absl::OkStatus();
}

absl::Status SiluBackwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  const float* dy = in[0].data<float>();
  const float* x = in[1].data<float>();
  float* dx = out[0].data<float>();
  ParallelMap(in[1].numel(), [&](int64_t i) { dx[i] = dy[i] * SiluGradF(x[i]); });
  return absl::OkStatus();
}

// ---- Cases ----
kernels::InputSpec F(Shape s, double lo = -3, double hi = 3) {
  kernels::InputSpec spec;
  spec.meta = {DType::kF32, std::move(s)};
  spec.lo = lo;
  spec.hi = hi;
  return spec;
}

kernels::OpDef MakeGelu() {
  kernels::OpDef d;
  d.name = "gelu";
  d.doc = "gelu(x) attr approximate (\"tanh\" | \"none\", default \"none\")";
  d.num_inputs = 1;
  d.infer = InferGelu;
  d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(bool t, GeluIsTanh(a));
    return RefMap(in, out, false, [t](double x) { return GeluRef(x, t); });
  };
  d.kernels[DeviceKind::kCPU] = KernelOrReference(GeluKernel, d.reference);
  d.elementwise = true;
  d.grad = [](kernels::GradBuilder& b, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    if (c.grad_outputs[0] == kernels::GradBuilder::kNone) return std::vector<int>{kernels::GradBuilder::kNone};
    LOOM_ASSIGN_OR_RETURN(int dx, b.Emit1("gelu_backward", {c.grad_outputs[0], c.inputs[0]}, c.attrs));
    return std::vector<int>{dx};
  };
  d.cases.push_back({"none_7x37", {F({7, 37})}, Attrs{{"approximate", std::string("none")}}});
  d.cases.push_back({"tanh_3x5x7", {F({3, 5, 7})}, Attrs{{"approximate", std::string("tanh")}}});
  d.cases.push_back({"default_scalar", {F({})}, Attrs{}});
  return d;
}

kernels::OpDef MakeGeluBackward() {
  kernels::OpDef d;
  d.name = "gelu_backward";
  d.doc = "gelu_backward(dy, x) attr approximate -> dx";
  d.num_inputs = 2;
  d.infer = InferGeluBackward;
  d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(bool t, GeluIsTanh(a));
    return RefMap(in, out, true, [t](double x) { return GeluGradRef(x, t); });
  };
  d.kernels[DeviceKind::kCPU] = KernelOrReference(GeluBackwardKernel, d.reference);
  d.elementwise = true;
  d.no_grad_reason = "backward op of gelu";
  d.cases.push_back({"none_7x37", {F({7, 37}), F({7, 37})}, Attrs{{"approximate", std::string("none")}}});
  d.cases.push_back({"tanh_3x5x7", {F({3, 5, 7}), F({3, 5, 7})}, Attrs{{"approximate", std::string("tanh")}}});
  return d;
}

kernels::OpDef MakeSilu() {
  kernels::OpDef d;
  d.name = "silu";
  d.doc = "silu(x) = x * sigmoid(x)";
  d.num_inputs = 1;
  d.infer = InferUnary;
  d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
    return RefMap(in, out, false, SiluRef);
  };
  d.kernels[DeviceKind::kCPU] = KernelOrReference(SiluKernel, d.reference);
  d.elementwise = true;
  d.grad = [](kernels::GradBuilder& b, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    if (c.grad_outputs[0] == kernels::GradBuilder::kNone) return std::vector<int>{kernels::GradBuilder::kNone};
    LOOM_ASSIGN_OR_RETURN(int dx, b.Emit1("silu_backward", {c.grad_outputs[0], c.inputs[0]}, c.attrs));
    return std::vector<int>{dx};
  };
  d.cases.push_back({"7x37", {F({7, 37}, -6, 6)}, Attrs{}});
  d.cases.push_back({"3x5x7", {F({3, 5, 7})}, Attrs{}});
  return d;
}

kernels::OpDef MakeSiluBackward() {
  kernels::OpDef d;
  d.name = "silu_backward";
  d.doc = "silu_backward(dy, x) -> dx";
  d.num_inputs = 2;
  d.infer = InferUnaryBackward;
  d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
    return RefMap(in, out, true, SiluGradRef);
  };
  d.kernels[DeviceKind::kCPU] = KernelOrReference(SiluBackwardKernel, d.reference);
  d.elementwise = true;
  d.no_grad_reason = "backward op of silu";
  d.cases.push_back({"7x37", {F({7, 37}), F({7, 37}, -6, 6)}, Attrs{}});
  d.cases.push_back({"3x5x7", {F({3, 5, 7}), F({3, 5, 7})}, Attrs{}});
  return d;
}

}  // namespace

LOOM_REGISTER_OP(MakeGelu());
LOOM_REGISTER_OP(MakeGeluBackward());
LOOM_REGISTER_OP(MakeSilu());
LOOM_REGISTER_OP(MakeSiluBackward());

}  // namespace loom::kernels::cpu::nn::internal
