// cross_entropy and cross_entropy_backward (see kernels/cpu/nn/nn_ops.h).
//
//   cross_entropy(logits[N, V], targets[N] i32|i64) attr ignore_index (default -100)
//       -> (loss[] = mean over non-ignored rows of lse_i - logits[i, t_i], lse[N])
//   cross_entropy_backward(dloss[], logits, targets, lse) attr ignore_index
//       -> dlogits[i, j] = dloss / n_valid * (exp(logits[i, j] - lse_i) - [j == t_i]),
//          0 on ignored rows.
// loss and lse have the logits' dtype. With every row ignored the loss is 0 (and
// so is its gradient); PyTorch returns NaN there. A target outside [0, V) that
// is not ignore_index is InvalidArgument naming "targets". The forward is a
// fused log-softmax: per row one max pass and one sum-of-exp pass; no
// probability matrix is formed. The grad rule differentiates `loss` only.
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/cpu/nn/common.h"

namespace loom::kernels::cpu::nn::internal {
namespace {

absl::Status CheckTargets(const std::vector<int64_t>& t, int64_t v, int64_t ignore, int64_t* valid) {
  *valid = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ignore) continue;
    if (t[i] < 0 || t[i] >= v)
      return absl::InvalidArgumentError(absl::StrCat("targets: target ", t[i], " at row ", i, " is outside [0, ", v,
                                                     ") and is not ignore_index (", ignore, ")"));
    ++*valid;
  }
  return absl::OkStatus();
}

absl::Status CheckLogitsTargets(const TensorMeta& logits, const TensorMeta& targets) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(logits, "logits"));
  LOOM_RETURN_IF_ERROR(ExpectRank(logits, "logits", 2));
  LOOM_RETURN_IF_ERROR(ExpectInteger(targets, "targets"));
  LOOM_RETURN_IF_ERROR(ExpectRank(targets, "targets", 1));
  if (targets.shape[0] != logits.shape[0])
    return absl::InvalidArgumentError(absl::StrCat("targets: ", targets.shape[0], " rows but logits has ",
                                                   logits.shape[0], " (", ShapeToString(logits.shape), ")"));
  if (logits.shape[1] == 0) return absl::InvalidArgumentError("logits: vocabulary dim is 0");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorMeta>> InferCE(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 2));
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "ignore_index", AttrKind::kInt));
  LOOM_RETURN_IF_ERROR(CheckLogitsTargets(in[0], in[1]));
  return std::vector<TensorMeta>{{in[0].dtype, Shape{}}, {in[0].dtype, Shape{in[0].shape[0]}}};
}

absl::StatusOr<std::vector<TensorMeta>> InferCEBackward(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 4));
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "ignore_index", AttrKind::kInt));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "dloss"));
  LOOM_RETURN_IF_ERROR(ExpectScalar(in[0], "dloss"));
  LOOM_RETURN_IF_ERROR(CheckLogitsTargets(in[1], in[2]));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in[3], "lse", in[1], "logits"));
  if (in[3].shape != Shape{in[1].shape[0]})
    return absl::InvalidArgumentError(absl::StrCat("lse: expected shape [", in[1].shape[0], "], got ",
                                                   ShapeToString(in[3].shape)));
  return std::vector<TensorMeta>{in[1]};
}

absl::Status CERef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  int64_t ignore = a.GetInt("ignore_index", -100);
  Tensor x = AsF64(in[0]);
  std::vector<int64_t> t = IdsOf(in[1]);
  int64_t n = x.dim(0), v = x.dim(1), valid = 0;
  LOOM_RETURN_IF_ERROR(CheckTargets(t, v, ignore, &valid));
  Tensor lse = NewF64(Shape{n}), loss = NewF64(Shape{});
  const double* px = x.data<double>();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, px[i * v + j]);
    for (int64_t j = 0; j < v; ++j) s += std::exp(px[i * v + j] - mx);
    lse.data<double>()[i] = mx + std::log(s);
    if (t[i] != ignore) total += lse.data<double>()[i] - px[i * v + t[i]];
  }
  loss.data<double>()[0] = valid > 0 ? total / valid : 0.0;
  LOOM_RETURN_IF_ERROR(Store(out[0], loss));
  return Store(out[1], lse);
}

absl::Status CEBackwardRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  int64_t ignore = a.GetInt("ignore_index", -100);
  double dloss = in[0].GetDouble(0);
  Tensor x = AsF64(in[1]), lse = AsF64(in[3]);
  std::vector<int64_t> t = IdsOf(in[2]);
  int64_t n = x.dim(0), v = x.dim(1), valid = 0;
  LOOM_RETURN_IF_ERROR(CheckTargets(t, v, ignore, &valid));
  Tensor dx = NewF64(x.shape());
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore) continue;
    for (int64_t j = 0; j < v; ++j) {
      double p = std::exp(x.data<double>()[i * v + j] - lse.data<double>()[i]);
      dx.data<double>()[i * v + j] = dloss / valid * (p - (j == t[i] ? 1.0 : 0.0));
    }
  }
  return Store(out[0], dx);
}

absl::Status CEKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  const int64_t ignore = a.GetInt("ignore_index", -100);
  const float* x = in[0].data<float>();
  std::vector<int64_t> t = IdsOf(in[1]);
  const int64_t n = in[0].dim(0), v = in[0].dim(1);
  int64_t valid = 0;
  LOOM_RETURN_IF_ERROR(CheckTargets(t, v, ignore, &valid));
  float* lse = out[1].data<float>();
  std::vector<double> row_loss(n, 0.0);
  ParallelFor(n, RowGrain(v), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* xr = x + i * v;
      float mx = BlockMax(v, [=](int64_t j) { return xr[j]; });
      if (mx == -INFINITY) mx = 0;
      const double s = BlockSum(v, [=](int64_t j) { return FastExp(xr[j] - mx); });
      const double l = mx + std::log(s);
      lse[i] = static_cast<float>(l);
      if (t[i] != ignore) row_loss[i] = l - xr[t[i]];
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;  // fixed order: deterministic
  out[0].data<float>()[0] = valid > 0 ? static_cast<float>(total / valid) : 0.0f;
  return absl::OkStatus();
}

absl::Status CEBackwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  const int64_t ignore = a.GetInt("ignore_index", -100);
  const float* x = in[1].data<float>();
  const float* lse = in[3].data<float>();
  std::vector<int64_t> t = IdsOf(in[2]);
  const int64_t n = in[1].dim(0), v = in[1].dim(1);
  int64_t valid = 0;
  LOOM_RETURN_IF_ERROR(CheckTargets(t, v, ignore, &valid));
  const float scale = valid > 0 ? static_cast<float>(in[0].GetDouble(0) / valid) : 0.0f;
  float* dx = out[0].data<float>();
  ParallelFor(n, RowGrain(v), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* dr = dx + i * v;
      if (t[i] == ignore) {
        std::fill(dr, dr + v, 0.0f);
        continue;
      }
      const float* xr = x + i * v;
      const float l = lse[i];
#pragma omp simd
      for (int64_t j = 0; j < v; ++j) dr[j] = scale * FastExp(xr[j] - l);
      dr[t[i]] -= scale;
    }
  });
  return absl::OkStatus();
}

kernels::InputSpec F(Shape s, double lo = -3, double hi = 3) {
  kernels::InputSpec spec;
  spec.meta = {DType::kF32, std::move(s)};
  spec.lo = lo;
  spec.hi = hi;
  return spec;
}

// Targets in [0, v) with the rows in `ignored` set to `ignore`.
kernels::InputSpec Targets(int64_t n, DType dt, int64_t v, std::vector<int64_t> ignored, int64_t ignore) {
  kernels::InputSpec spec;
  spec.meta = {dt, Shape{n}};
  spec.differentiable = false;
  spec.fill = [v, ignored, ignore](Tensor& t, const Philox& rng) {
    for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, static_cast<double>(rng.Bits(i) % v));
    for (int64_t i : ignored) t.SetDouble(i, static_cast<double>(ignore));
  };
  return spec;
}

kernels::OpDef MakeCE() {
  kernels::OpDef d;
  d.name = "cross_entropy";
  d.doc = "cross_entropy(logits[N, V], targets[N] i32|i64) attr ignore_index (default -100) -> (loss[], lse[N])";
  d.num_inputs = 2;
  d.num_outputs = 2;
  d.infer = InferCE;
  d.reference = CERef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(CEKernel, CERef);
  d.grad = [](kernels::GradBuilder& b, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    constexpr int kNone = kernels::GradBuilder::kNone;
    if (c.grad_outputs[0] == kNone) return std::vector<int>{kNone, kNone};
    LOOM_ASSIGN_OR_RETURN(int dx, b.Emit1("cross_entropy_backward",
                                          {c.grad_outputs[0], c.inputs[0], c.inputs[1], c.outputs[1]}, c.attrs));
    return std::vector<int>{dx, kNone};
  };
  d.cases.push_back({"N7_V11_two_ignored", {F({7, 11}), Targets(7, DType::kI64, 11, {2, 5}, -100)}, Attrs{}, {0}});
  d.cases.push_back({"N5_V37_ignore3_i32", {F({5, 37}, -10, 10), Targets(5, DType::kI32, 37, {1}, 3)},
                     Attrs{{"ignore_index", int64_t{3}}}, {0}});
  d.cases.push_back({"all_ignored", {F({3, 4}), Targets(3, DType::kI64, 4, {0, 1, 2}, -100)}, Attrs{}, {0}});
  return d;
}

kernels::OpDef MakeCEBackward() {
  kernels::OpDef d;
  d.name = "cross_entropy_backward";
  d.doc = "cross_entropy_backward(dloss[], logits[N, V], targets[N], lse[N]) attr ignore_index -> dlogits";
  d.num_inputs = 4;
  d.infer = InferCEBackward;
  d.reference = CEBackwardRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(CEBackwardKernel, CEBackwardRef);
  d.no_grad_reason = "backward op of cross_entropy";
  d.cases.push_back({"N7_V11_two_ignored",
                     {F({}, 0.5, 2), F({7, 11}), Targets(7, DType::kI64, 11, {2, 5}, -100), F({7}, 2, 4)},
                     Attrs{}});
  d.cases.push_back({"N5_V37_ignore3",
                     {F({}, 0.5, 2), F({5, 37}), Targets(5, DType::kI32, 37, {1, 4}, 3), F({5}, 3, 5)},
                     Attrs{{"ignore_index", int64_t{3}}}});
  return d;
}

}  // namespace

LOOM_REGISTER_OP(MakeCE());
LOOM_REGISTER_OP(MakeCEBackward());

}  // namespace loom::kernels::cpu::nn::internal
