// softmax, log_softmax and their backward ops (see kernels/cpu/nn/nn_ops.h).
//
//   softmax(x) attr axis (default -1)          y = exp(x - max) / sum exp(x - max)
//   log_softmax(x) attr axis                   y = x - max - log sum exp(x - max)
//   softmax_backward(dy, y) attr axis          dx = y * (dy - sum(dy * y))
//   log_softmax_backward(dy, y) attr axis      dx = dy - exp(y) * sum(dy)
// The fast kernel views x as [outer, n, inner] (n = the axis length). The last
// axis (inner == 1) runs vectorised per row; other axes run per column.
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/cpu/nn/common.h"

namespace loom::kernels::cpu::nn::internal {
namespace {

enum class Mode { kSoftmax, kLogSoftmax, kSoftmaxBwd, kLogSoftmaxBwd };

struct Geometry {
  int64_t outer = 1, n = 1, inner = 1;
};

absl::StatusOr<Geometry> GeometryOf(const Shape& s, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "axis", AttrKind::kInt));
  LOOM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a.GetInt("axis", -1), static_cast<int>(s.size())));
  Geometry g;
  for (int i = 0; i < axis; ++i) g.outer *= s[i];
  g.n = s[axis];
  for (size_t i = axis + 1; i < s.size(); ++i) g.inner *= s[i];
  return g;
}

absl::StatusOr<std::vector<TensorMeta>> InferForward(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "x"));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in[0], "x", 1));
  LOOM_RETURN_IF_ERROR(GeometryOf(in[0].shape, a).status());
  return std::vector<TensorMeta>{in[0]};
}

absl::StatusOr<std::vector<TensorMeta>> InferBackward(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "dy"));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[1], "y"));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in[0], "dy", in[1], "y"));
  LOOM_RETURN_IF_ERROR(ExpectSameShape(in[0], "dy", in[1], "y"));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in[1], "y", 1));
  LOOM_RETURN_IF_ERROR(GeometryOf(in[1].shape, a).status());
  return std::vector<TensorMeta>{in[1]};
}

// ---- Reference: one lane (o, k) at a time in double ----
absl::Status Reference(Mode mode, absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  LOOM_ASSIGN_OR_RETURN(Geometry g, GeometryOf(in[0].shape(), a));
  Tensor x = AsF64(in[0]);  // x, or dy for the backward modes
  Tensor y = in.size() > 1 ? AsF64(in[1]) : Tensor();
  Tensor r = NewF64(x.shape());
  const double* px = x.data<double>();
  double* pr = r.data<double>();
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t k = 0; k < g.inner; ++k) {
      auto at = [&](int64_t j) { return (o * g.n + j) * g.inner + k; };
      if (mode == Mode::kSoftmax || mode == Mode::kLogSoftmax) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < g.n; ++j) mx = std::max(mx, px[at(j)]);
        double s = 0;
        for (int64_t j = 0; j < g.n; ++j) s += std::exp(px[at(j)] - mx);
        for (int64_t j = 0; j < g.n; ++j)
          pr[at(j)] = mode == Mode::kSoftmax ? std::exp(px[at(j)] - mx) / s : px[at(j)] - mx - std::log(s);
      } else {
        const double* py = y.data<double>();
        double s = 0;
        for (int64_t j = 0; j < g.n; ++j) s += mode == Mode::kSoftmaxBwd ? px[at(j)] * py[at(j)] : px[at(j)];
        for (int64_t j = 0; j < g.n; ++j)
          pr[at(j)] = mode == Mode::kSoftmaxBwd ? py[at(j)] * (px[at(j)] - s) : px[at(j)] - std::exp(py[at(j)]) * s;
      }
    }
  }
  return Store(out[0], r);
}

// ---- Fast kernel: one lane of n elements at stride `st` ----
template <int64_t kStride>
void Lane(Mode mode, const float* x, const float* y, float* r, int64_t n, int64_t stride) {
  const int64_t st = kStride > 0 ? kStride : stride;
  switch (mode) {
    case Mode::kSoftmax:
    case Mode::kLogSoftmax: {
      float mx = BlockMax(n, [=](int64_t j) { return x[j * st]; });
      if (mx == -INFINITY) mx = 0;  // all -inf: avoid inf - inf
      if (mode == Mode::kSoftmax) {
        double s = 0;
        for (int64_t b = 0; b < n; b += 256) {
          int64_t e = std::min<int64_t>(n, b + 256);
          float bs = 0;
#pragma omp simd reduction(+ : bs)
          for (int64_t j = b; j < e; ++j) {
            float v = FastExp(x[j * st] - mx);
            r[j * st] = v;
            bs += v;
          }
          s += bs;
        }
        const float inv = static_cast<float>(1.0 / s);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) r[j * st] *= inv;
      } else {
        // (x - max) - log(sum), not x - (max + log(sum)): with a large max the
        // second form rounds away the log term's low bits.
        double s = BlockSum(n, [=](int64_t j) { return FastExp(x[j * st] - mx); });
        const float ls = static_cast<float>(std::log(s));
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) r[j * st] = (x[j * st] - mx) - ls;
      }
      break;
    }
    case Mode::kSoftmaxBwd: {
      const float s = static_cast<float>(BlockSum(n, [=](int64_t j) { return x[j * st] * y[j * st]; }));
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) r[j * st] = y[j * st] * (x[j * st] - s);
      break;
    }
    case Mode::kLogSoftmaxBwd: {
      const float s = static_cast<float>(BlockSum(n, [=](int64_t j) { return x[j * st]; }));
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) r[j * st] = x[j * st] - FastExp(y[j * st]) * s;
      break;
    }
  }
}

absl::Status Kernel(Mode mode, absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  LOOM_ASSIGN_OR_RETURN(Geometry g, GeometryOf(in[0].shape(), a));
  const float* x = in[0].data<float>();
  const float* y = in.size() > 1 ? in[1].data<float>() : nullptr;
  float* r = out[0].data<float>();
  if (g.inner == 1) {
    ParallelFor(g.outer, RowGrain(g.n), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o)
        Lane<1>(mode, x + o * g.n, y ? y + o * g.n : nullptr, r + o * g.n, g.n, 1);
    });
  } else {
    ParallelFor(g.outer * g.inner, RowGrain(g.n), [&](int64_t lo, int64_t hi) {
      for (int64_t l = lo; l < hi; ++l) {
        int64_t base = (l / g.inner) * g.n * g.inner + l % g.inner;
        Lane<0>(mode, x + base, y ? y + base : nullptr, r + base, g.n, g.inner);
      }
    });
  }
  return absl::OkStatus();
}

kernels::InputSpec F(Shape s, double lo = -3, double hi = 3) {
  kernels::InputSpec spec;
  spec.meta = {DType::kF32, std::move(s)};
  spec.lo = lo;
  spec.hi = hi;
  return spec;
}

kernels::OpDef Make(const std::string& name, Mode mode) {
  bool backward = mode == Mode::kSoftmaxBwd || mode == Mode::kLogSoftmaxBwd;
  std::string fwd = mode == Mode::kSoftmax || mode == Mode::kSoftmaxBwd ? "softmax" : "log_softmax";
  kernels::OpDef d;
  d.name = name;
  d.num_inputs = backward ? 2 : 1;
  d.doc = backward ? absl::StrCat(name, "(dy, y) attr axis (default -1) -> dx")
                   : absl::StrCat(name, "(x) attr axis (default -1)");
  d.infer = backward ? InferBackward : InferForward;
  d.reference = [mode](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
    return Reference(mode, in, out, a);
  };
  d.kernels[DeviceKind::kCPU] = KernelOrReference(
      [mode](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) { return Kernel(mode, in, out, a); },
      d.reference);
  if (backward) {
    d.no_grad_reason = absl::StrCat("backward op of ", fwd);
    // y of log_softmax is <= 0; keep it in range for realism.
    double ylo = mode == Mode::kLogSoftmaxBwd ? -4 : 0, yhi = mode == Mode::kLogSoftmaxBwd ? 0 : 1;
    d.cases.push_back({"rows7_C37", {F({7, 37}), F({7, 37}, ylo, yhi)}, Attrs{}});
    d.cases.push_back({"3x5x7_axis1", {F({3, 5, 7}), F({3, 5, 7}, ylo, yhi)}, Attrs{{"axis", int64_t{1}}}});
  } else {
    std::string bwd = absl::StrCat(name, "_backward");
    d.grad = [bwd](kernels::GradBuilder& b, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
      if (c.grad_outputs[0] == kernels::GradBuilder::kNone) return std::vector<int>{kernels::GradBuilder::kNone};
      LOOM_ASSIGN_OR_RETURN(int dx, b.Emit1(bwd, {c.grad_outputs[0], c.outputs[0]}, c.attrs));
      return std::vector<int>{dx};
    };
    d.cases.push_back({"rows7_C37", {F({7, 37})}, Attrs{}});
    d.cases.push_back({"3x5x7_axis1", {F({3, 5, 7})}, Attrs{{"axis", int64_t{1}}}});
    d.cases.push_back({"3x5x7_axis0_neg", {F({3, 5, 7}, -20, 20)}, Attrs{{"axis", int64_t{-3}}}});
    d.cases.push_back({"1d_C1", {F({1})}, Attrs{}});
  }
  return d;
}

}  // namespace

LOOM_REGISTER_OP(Make("softmax", Mode::kSoftmax));
LOOM_REGISTER_OP(Make("log_softmax", Mode::kLogSoftmax));
LOOM_REGISTER_OP(Make("softmax_backward", Mode::kSoftmaxBwd));
LOOM_REGISTER_OP(Make("log_softmax_backward", Mode::kLogSoftmaxBwd));

}  // namespace loom::kernels::cpu::nn::internal
