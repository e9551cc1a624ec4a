// rope: rotary position embedding (see kernels/cpu/nn/nn_ops.h).
//
//   rope(x[B, T, H, D]) attrs theta (default 10000), offset (default 0; the
//   position of t = 0), inverse (default false) -> y[B, T, H, D]
//
// Interleaved form (Meta Llama / GPT-J): the pairs (x[2i], x[2i+1]),
// i in [0, D/2), are rotated by angle a(t, i) = (offset + t) * theta^(-2i / D):
//   y[2i]   = x[2i] cos a - x[2i+1] sin a
//   y[2i+1] = x[2i] sin a + x[2i+1] cos a
// inverse=true rotates by -a. (HF's GPT-NeoX "rotate_half" layout pairs
// (i, i + D/2) instead: it is this op applied to a permuted D axis.)
// The rotation is orthogonal, so the gradient is rope with `inverse` flipped.
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/cpu/nn/common.h"

namespace loom::kernels::cpu::nn::internal {
namespace {

struct RopeAttrs {
  double theta;
  int64_t offset;
  bool inverse;
};

absl::StatusOr<RopeAttrs> ParseAttrs(const Attrs& a) {
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "theta", AttrKind::kFloat));
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "offset", AttrKind::kInt));
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "inverse", AttrKind::kBool));
  RopeAttrs r{a.GetFloat("theta", 10000.0), a.GetInt("offset", 0), a.GetBool("inverse", false)};
  if (!(r.theta > 0)) return absl::InvalidArgumentError(absl::StrCat("theta: expected > 0, got ", r.theta));
  return r;
}

absl::StatusOr<std::vector<TensorMeta>> InferRope(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 1));
  LOOM_RETURN_IF_ERROR(ParseAttrs(a).status());
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "x"));
  if (in[0].shape.size() != 4)
    return absl::InvalidArgumentError(
        absl::StrCat("x: expected 4 dims [B, T, H, D], got shape ", ShapeToString(in[0].shape)));
  if (in[0].shape[3] % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat("x: head dim D = ", in[0].shape[3], " must be even"));
  return std::vector<TensorMeta>{in[0]};
}

// Angle of pair i at time t, in double.
double Angle(const RopeAttrs& r, int64_t t, int64_t i, int64_t d) {
  double a = static_cast<double>(r.offset + t) * std::pow(r.theta, -2.0 * static_cast<double>(i) / d);
  return r.inverse ? -a : a;
}

absl::Status RopeRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) {
  LOOM_ASSIGN_OR_RETURN(RopeAttrs r, ParseAttrs(attrs));
  Tensor x = AsF64(in[0]);
  Tensor y = NewF64(x.shape());
  int64_t B = x.dim(0), T = x.dim(1), H = x.dim(2), D = x.dim(3);
  const double* px = x.data<double>();
  double* py = y.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          int64_t base = ((b * T + t) * H + h) * D + 2 * i;
          double a = Angle(r, t, i, D), c = std::cos(a), s = std::sin(a);
          py[base] = px[base] * c - px[base + 1] * s;
          py[base + 1] = px[base] * s + px[base + 1] * c;
        }
  return Store(out[0], y);
}

absl::Status RopeKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) {
  LOOM_ASSIGN_OR_RETURN(RopeAttrs r, ParseAttrs(attrs));
  const int64_t B = in[0].dim(0), T = in[0].dim(1), H = in[0].dim(2), D = in[0].dim(3), P = D / 2;
  // cos/sin table [T, P], computed in f64 (large positions lose nothing to f32 angles).
  std::vector<float> cs(static_cast<size_t>(T * P)), sn(static_cast<size_t>(T * P));
  ParallelFor(T, RowGrain(P, 4096), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      for (int64_t i = 0; i < P; ++i) {
        double a = Angle(r, t, i, D);
        cs[t * P + i] = static_cast<float>(std::cos(a));
        sn[t * P + i] = static_cast<float>(std::sin(a));
      }
  });
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  ParallelFor(B * T, RowGrain(H * D), [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const float* c = cs.data() + (bt % T) * P;
      const float* s = sn.data() + (bt % T) * P;
      for (int64_t h = 0; h < H; ++h) {
        const float* xr = x + (bt * H + h) * D;
        float* yr = y + (bt * H + h) * D;
#pragma omp simd
        for (int64_t i = 0; i < P; ++i) {
          const float x0 = xr[2 * i], x1 = xr[2 * i + 1];
          yr[2 * i] = x0 * c[i] - x1 * s[i];
          yr[2 * i + 1] = x0 * s[i] + x1 * c[i];
        }
      }
    }
  });
  return absl::OkStatus();
}

kernels::InputSpec F(Shape s) {
  kernels::InputSpec spec;
  spec.meta = {DType::kF32, std::move(s)};
  return spec;
}

kernels::OpDef MakeRope() {
  kernels::OpDef d;
  d.name = "rope";
  d.doc = "rope(x[B, T, H, D]) attrs theta (10000), offset (0), inverse (false); interleaved pairs (2i, 2i+1)";
  d.num_inputs = 1;
  d.infer = InferRope;
  d.reference = RopeRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(RopeKernel, RopeRef);
  d.grad = [](kernels::GradBuilder& b, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    if (c.grad_outputs[0] == kernels::GradBuilder::kNone) return std::vector<int>{kernels::GradBuilder::kNone};
    Attrs a = c.attrs;
    a.Set("inverse", !c.attrs.GetBool("inverse", false));
    LOOM_ASSIGN_OR_RETURN(int dx, b.Emit1("rope", {c.grad_outputs[0]}, a));
    return std::vector<int>{dx};
  };
  d.cases.push_back({"B2_T5_H3_D8", {F({2, 5, 3, 8})}, Attrs{}});
  d.cases.push_back({"T5_H3_D8_offset7_inverse",
                     {F({1, 5, 3, 8})},
                     Attrs{{"theta", 500.0}, {"offset", int64_t{7}}, {"inverse", true}}});
  d.cases.push_back({"D2_offset1000", {F({3, 2, 1, 2})}, Attrs{{"offset", int64_t{1000}}}});
  return d;
}

}  // namespace

LOOM_REGISTER_OP(MakeRope());

}  // namespace loom::kernels::cpu::nn::internal
