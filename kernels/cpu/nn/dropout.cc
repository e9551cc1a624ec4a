// dropout(x[, offset]) attrs p (0), seed (0) -> y            (see nn_ops.h)
//
// Element i of x (row-major) is kept iff Philox(seed, offset).Uniform(i) >=
// float(p) -- the keep rule of attention dropout (kernels/sdpa,
// kernels/cuda/attention/sdpa_dropout.h) -- and kept elements are scaled by
// 1 / (1 - p). offset is the optional scalar input (i32, i64, f32 or f64
// holding a whole number >= 0; absent = 0): feed it the training step and the
// masks differ from step to step while a restarted run, at the same step,
// draws the same ones. No mask is stored: the gradient is dropout of dy with
// the same seed and offset. p = 0 copies x bit for bit.
//
// Not elementwise for fusion: the mask depends on each element's index in the
// whole tensor, which a fused chunk does not see.
#include <cstring>

#include "base/rng.h"
#include "base/thread_pool.h"
#include "kernels/cpu/nn/common.h"

namespace loom::kernels::cpu::nn::internal {
namespace {

struct DropoutParams {
  double p = 0;
  uint64_t seed = 0, offset = 0;
};

absl::Status CheckDropoutAttrs(const Attrs& a) {
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "p", AttrKind::kFloat));
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "seed", AttrKind::kInt));
  const double p = a.GetFloat("p", 0.0);
  if (!(p >= 0.0 && p < 1.0)) return absl::InvalidArgumentError(absl::StrCat("p: must be in [0, 1), got ", p));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorMeta>> InferDropout(absl::Span<const TensorMeta> in, const Attrs& a) {
  if (in.size() != 1 && in.size() != 2)
    return absl::InvalidArgumentError(absl::StrCat("expected 1 or 2 inputs (x[, offset]), got ", in.size()));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "x"));
  if (in.size() == 2) {
    LOOM_RETURN_IF_ERROR(ExpectScalar(in[1], "offset"));
    const DType t = in[1].dtype;
    if (t != DType::kI32 && t != DType::kI64 && t != DType::kF32 && t != DType::kF64)
      return absl::InvalidArgumentError(
          absl::StrCat("offset: expected dtype i32, i64, f32 or f64, got ", DTypeName(t)));
  }
  LOOM_RETURN_IF_ERROR(CheckDropoutAttrs(a));
  return std::vector<TensorMeta>{in[0]};
}

// The attributes and the offset input's value (validated: whole, >= 0).
absl::StatusOr<DropoutParams> ParamsOf(absl::Span<const Tensor> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(CheckDropoutAttrs(a));
  DropoutParams d;
  d.p = a.GetFloat("p", 0.0);
  d.seed = static_cast<uint64_t>(a.GetInt("seed", 0));
  if (in.size() < 2) return d;
  const Tensor& o = in[1];
  if (IsFloating(o.dtype())) {
    const double v = o.GetDouble(0);
    if (!(v >= 0 && v < 18446744073709551616.0 && v == std::floor(v)))
      return absl::InvalidArgumentError(absl::StrCat("offset: expected a whole number >= 0, got ", v));
    d.offset = static_cast<uint64_t>(v);
  } else {
    const int64_t v = o.dtype() == DType::kI64 ? o.data<int64_t>()[0] : o.data<int32_t>()[0];
    if (v < 0) return absl::InvalidArgumentError(absl::StrCat("offset: expected a whole number >= 0, got ", v));
    d.offset = static_cast<uint64_t>(v);
  }
  return d;
}

// ---- Reference: element by element in double ----
absl::Status DropoutReference(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  LOOM_ASSIGN_OR_RETURN(DropoutParams d, ParamsOf(in, a));
  if (d.p == 0) return out[0].CopyFrom(in[0]);
  const Philox rng(d.seed, d.offset);
  const double scale = 1.0 / (1.0 - d.p);
  for (int64_t i = 0; i < in[0].numel(); ++i) {
    const bool keep = rng.Uniform(static_cast<uint64_t>(i)) >= static_cast<float>(d.p);
    out[0].SetDouble(i, keep ? in[0].GetDouble(i) * scale : 0.0);
  }
  return absl::OkStatus();
}

// ---- Fast f32 kernel: one Philox block per 4 elements, blocks in parallel ----
absl::Status DropoutKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  LOOM_ASSIGN_OR_RETURN(DropoutParams d, ParamsOf(in, a));
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  const int64_t n = in[0].numel();
  if (d.p == 0) {
    if (n > 0) std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
    return absl::OkStatus();
  }
  const Philox rng(d.seed, d.offset);
  const float p = static_cast<float>(d.p), scale = static_cast<float>(1.0 / (1.0 - d.p));
  ParallelFor((n + 3) / 4, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      uint32_t w[4];
      rng.Block(static_cast<uint64_t>(b), w);
      for (int64_t j = 0, i = 4 * b; j < 4 && i < n; ++j, ++i) {
        const float u = (w[j] >> 8) * (1.0f / 16777216.0f);
        y[i] = u >= p ? x[i] * scale : 0.0f;
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

// A non-differentiable scalar offset input holding `value`.
kernels::InputSpec Offset(DType t, double value) {
  kernels::InputSpec spec;
  spec.meta = {t, {}};
  spec.differentiable = false;
  spec.fill = [value](Tensor& o, const Philox&) { o.SetDouble(0, value); };
  return spec;
}

kernels::OpDef MakeDropout() {
  kernels::OpDef d;
  d.name = "dropout";
  d.doc = "x * mask / (1 - p), mask from Philox(seed, offset) per element; optional scalar offset input";
  d.num_inputs = -1;
  d.infer = InferDropout;
  d.reference = DropoutReference;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(DropoutKernel, d.reference);
  d.grad = [](kernels::GradBuilder& b, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    std::vector<int> g(c.inputs.size(), kernels::GradBuilder::kNone);
    if (c.grad_outputs[0] == kernels::GradBuilder::kNone) return g;
    std::vector<int> args = {c.grad_outputs[0]};
    if (c.inputs.size() == 2) args.push_back(c.inputs[1]);
    LOOM_ASSIGN_OR_RETURN(g[0], b.Emit1("dropout", args, c.attrs));
    return g;
  };
  const Attrs p3{{"p", 0.3}, {"seed", int64_t{5}}};
  d.cases.push_back({"p0.3_3x5x7", {F({3, 5, 7})}, p3});
  d.cases.push_back(
      {"i64_offset_odd_length", {F({37}), Offset(DType::kI64, 7)}, Attrs{{"p", 0.5}, {"seed", int64_t{-2}}}});
  d.cases.push_back({"f32_step_offset", {F({4, 9}), Offset(DType::kF32, 3)}, p3});
  d.cases.push_back({"p0_identity", {F({2, 13})}, Attrs{{"p", 0.0}}});
  return d;
}

}  // namespace

LOOM_REGISTER_OP(MakeDropout());

}  // namespace loom::kernels::cpu::nn::internal
