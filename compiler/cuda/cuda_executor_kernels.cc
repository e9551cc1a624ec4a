// CudaExecutor (cuda_executor_impl.h): launches of the row kernels —
// embedding (+backward), sum_to (column sums), layernorm (the generated
// kernel of kernels/cuda/codegen/rowwise.h, with the adds before it) and its
// backward (kernels/cuda/layernorm.h), rmsnorm (+backward), rope, and
// cross-entropy (forward, backward, or the fused pair) from kernels/cuda.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/reductions.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"

namespace loom::compiler::cuda::cuda_executor_internal {

absl::Status Impl::BuildEmbedding(const Launch& l) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  cudaStream_t s = stream_;
  if (l.kind == LaunchKind::kEmbedding) {
    const kern::Dt wdt = ToDt(Dt(in[0])), odt = ToDt(Dt(out[0])), idt = ToDt(Dt(in[1]));
    const int64_t rows = Numel(in[1]), cols = Sh(in[0])[1], vocab = Sh(in[0])[0];
    const void* w = Ptr(in[0]);
    const void* ids = Ptr(in[1]);
    void* o = Ptr(out[0]);
    calls_.push_back(
        [=]() { return CudaErr(kern::Embedding(wdt, odt, idt, rows, cols, vocab, w, ids, o, s), "embedding"); });
    return absl::OkStatus();
  }
  const kern::Dt ddt = ToDt(Dt(in[0])), idt = ToDt(Dt(in[1]));
  const int64_t rows = Numel(in[1]), cols = Sh(out[0])[1], vocab = Sh(out[0])[0];
  const void* dy = Ptr(in[0]);
  const void* ids = Ptr(in[1]);
  float* o = static_cast<float*>(Ptr(out[0]));
  // The sorted (deterministic) kernel works in the shared scratch buffer
  // (ScratchBytes sized it), so a step allocates nothing.
  const bool sorted = l.kind == LaunchKind::kEmbeddingBackwardSorted;
  const kern::EmbeddingBwdMode mode = sorted ? kern::kEmbBwdSorted : kern::kEmbBwdAtomic;
  void* ws = sorted ? scratch_ : nullptr;
  const size_t ws_bytes = sorted ? static_cast<size_t>(scratch_bytes_) : 0;
  const char* what = sorted ? "embedding_backward_sorted" : "embedding_backward";
  calls_.push_back([=]() {
    return CudaErr(kern::EmbeddingBackward(ddt, idt, rows, cols, vocab, dy, ids, o, s, mode, ws, ws_bytes), what);
  });
  return absl::OkStatus();
}

absl::Status Impl::BuildRowReduce(const Launch& l) {
  const kern::Dt xdt = ToDt(Dt(l.inputs[0])), odt = ToDt(Dt(l.outputs[0]));
  const int64_t rows = Numel(l.outputs[0]), cols = Numel(l.inputs[0]) / std::max<int64_t>(rows, 1);
  const kern::RowReduceKind kind = l.op == "max" ? kern::kRowMax : kern::kRowSum;
  const void* x = Ptr(l.inputs[0]);
  void* o = Ptr(l.outputs[0]);
  cudaStream_t s = stream_;
  calls_.push_back([=]() { return CudaErr(kern::RowReduce(kind, xdt, odt, rows, cols, x, o, s), "row_reduce"); });
  return absl::OkStatus();
}

absl::Status Impl::BuildSumTo(const Launch& l) {
  const kern::Dt xdt = ToDt(Dt(l.inputs[0])), odt = ToDt(Dt(l.outputs[0]));
  const int64_t cols = Numel(l.outputs[0]), rows = Numel(l.inputs[0]) / std::max<int64_t>(cols, 1);
  const void* x = Ptr(l.inputs[0]);
  void* o = Ptr(l.outputs[0]);
  float* ws = static_cast<float*>(scratch_);
  cudaStream_t s = stream_;
  calls_.push_back([=]() { return CudaErr(kern::SumRows(xdt, odt, rows, cols, x, o, ws, s), "sum_to"); });
  return absl::OkStatus();
}

// The generated layernorm: inputs {x, weight, bias} -> {y, mean, rstd}, or
// with the adds before it (PlanOptions::add_layernorm) inputs {addends..,
// weight, bias} -> {sum, y, mean, rstd}.
absl::Status Impl::BuildLayerNorm(const Launch& l, std::string* desc) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  // in: addends (or x), weight[, bias]; out: [sum,] y[, mean], rstd.
  const bool rms = l.attrs.GetBool("rms", false);
  const size_t na = in.size() - (rms ? 1 : 2);
  const bool fused = na > 1;
  const int y = out[fused ? 1 : 0];
  cg::LnSpec sp;
  sp.cols = Sh(y).back();
  const int64_t rows = Numel(y) / std::max<int64_t>(sp.cols, 1);
  sp.dtype = Dt(fused ? out[0] : in[0]);  // x or h; y may differ (an f32 stream into bf16)
  if (Dt(y) != sp.dtype) sp.y_dtype = Dt(y);
  sp.eps = l.attrs.GetFloat("eps", rms ? 1e-6 : 1e-5);  // the ops' defaults (kernels/cpu/nn/norms.cc)
  sp.rms = rms;
  sp.has_bias = !rms;
  if (fused)
    for (size_t q = 0; q < na; ++q)
      sp.addends.push_back({Dt(in[q]), Numel(in[q]) == rows * sp.cols ? 0 : Numel(in[q]) / sp.cols});
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::RowwiseKernel> k, cg::RowwiseKernel::Uncompiled(cg::GenerateLayerNorm(sp)));
  cg::LnParams p;
  for (size_t q = 0; q < (fused ? na : 1); ++q) p.in[q] = Ptr(in[q]);
  p.gamma = static_cast<const float*>(Ptr(in[na]));
  p.beta = rms ? nullptr : static_cast<const float*>(Ptr(in[na + 1]));
  p.h = fused ? Ptr(out[0]) : nullptr;
  p.y = Ptr(y);
  p.mean = rms ? nullptr : static_cast<float*>(Ptr(out[fused ? 2 : 1]));
  p.rstd = static_cast<float*>(Ptr(out.back()));
  p.rows = rows;
  const cg::RowwiseKernel* kp = k.get();
  row_kernels_.push_back(std::move(k));
  absl::StrAppend(desc, " generated");
  cudaStream_t s = stream_;
  calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
  return absl::OkStatus();
}

absl::Status Impl::BuildLayerNormBackward(const Launch& l) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  loom::kernels::cuda::LayerNormBwdArgs a;
  a.dtype = Dt(in[0]);
  a.cols = Sh(in[1]).back();
  a.rows = Numel(in[1]) / a.cols;
  a.dy = Ptr(in[0]);
  a.x = Ptr(in[1]);
  a.weight = static_cast<const float*>(Ptr(in[2]));
  a.mean = static_cast<const float*>(Ptr(in[3]));
  a.rstd = static_cast<const float*>(Ptr(in[4]));
  a.dx = Ptr(out[0]);
  a.dweight = static_cast<float*>(Ptr(out[1]));
  a.dbias = static_cast<float*>(Ptr(out[2]));
  a.workspace = static_cast<float*>(scratch_);
  if (in.size() > 5) a.dresidual = Ptr(in[5]);  // layernorm_backward+add
  a.stream = stream_;
  calls_.push_back([a]() { return loom::kernels::cuda::LayerNormBackward(a); });
  return absl::OkStatus();
}

absl::Status Impl::BuildRmsNorm(const Launch& l) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  cudaStream_t s = stream_;
  if (l.kind == LaunchKind::kRmsNorm) {
    const kern::Dt dt = ToDt(Dt(in[0]));
    const int64_t cols = Sh(in[0]).back(), rows = Numel(in[0]) / std::max<int64_t>(cols, 1);
    const double eps = l.attrs.GetFloat("eps", 1e-6);
    const void* x = Ptr(in[0]);
    const float* w = static_cast<const float*>(Ptr(in[1]));
    void* y = Ptr(out[0]);
    float* rstd = static_cast<float*>(Ptr(out[1]));
    calls_.push_back(
        [=]() { return CudaErr(kern::RmsNormForward(dt, rows, cols, x, w, eps, y, rstd, s), "rmsnorm"); });
    return absl::OkStatus();
  }
  // {dy, x, weight, rstd[, dresidual]} -> {dx, dweight[, dx in bf16]}, each
  // float operand in its own dtype (the f32 residual stream's norm).
  kern::RmsNormBwdArgs a;
  a.dy_dt = ToDt(Dt(in[0]));
  a.x_dt = ToDt(Dt(in[1]));
  a.dx_dt = ToDt(Dt(out[0]));
  a.cols = Sh(in[1]).back();
  a.rows = Numel(in[1]) / std::max<int64_t>(a.cols, 1);
  a.dy = Ptr(in[0]);
  a.x = Ptr(in[1]);
  a.w = static_cast<const float*>(Ptr(in[2]));
  a.rstd = static_cast<const float*>(Ptr(in[3]));
  if (in.size() > 4) {  // rmsnorm_backward+add
    a.dres_dt = ToDt(Dt(in[4]));
    a.dresidual = Ptr(in[4]);
  }
  a.dx = Ptr(out[0]);
  a.dw = static_cast<float*>(Ptr(out[1]));
  if (out.size() > 2) a.dx_bf16 = Ptr(out[2]);
  a.workspace = static_cast<float*>(scratch_);
  a.stream = s;
  calls_.push_back([a]() { return CudaErr(kern::RmsNormBackward(a), "rmsnorm_backward"); });
  return absl::OkStatus();
}

absl::Status Impl::BuildRope(const Launch& l) {
  const kern::Dt dt = ToDt(Dt(l.inputs[0]));
  const Shape& sh = Sh(l.inputs[0]);
  const int64_t B = sh[0], T = sh[1], H = sh[2], D = sh[3];
  const double theta = l.attrs.GetFloat("theta", 10000.0);
  const int64_t offset = l.attrs.GetInt("offset", 0);
  const bool inverse = l.attrs.GetBool("inverse", false);
  // One angle table per (T, D, theta, offset), filled now, outside any step.
  const std::string key = absl::StrCat(T, " ", D, " ", theta, " ", offset);
  float*& table = rope_tables_[key];
  if (table == nullptr) {
    LOOM_ASSIGN_OR_RETURN(void* t, Alloc(4 * kern::RopeTableFloats(T, D)));
    table = static_cast<float*>(t);
    if (!dry_) LOOM_RETURN_IF_ERROR(CudaErr(kern::RopeTable(T, D, theta, offset, table, stream_), "rope table"));
  }
  const float* tab = table;
  const void* x = Ptr(l.inputs[0]);
  void* y = Ptr(l.outputs[0]);
  cudaStream_t s = stream_;
  calls_.push_back([=]() { return CudaErr(kern::Rope(dt, B, T, H, D, inverse, tab, x, y, s), "rope"); });
  return absl::OkStatus();
}

// kCrossEntropy: {logits, targets} -> {loss, lse}; kCrossEntropyBackward:
// {dloss, logits, targets, lse} -> {dlogits}; kCrossEntropyFused: {dloss,
// logits, targets} -> {loss, lse, dlogits}.
absl::Status Impl::BuildCrossEntropy(const Launch& l) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  const bool fwd = l.kind == LaunchKind::kCrossEntropy;
  const int lg_v = in[fwd ? 0 : 1], tg_v = in[fwd ? 1 : 2];
  const kern::Dt ldt = ToDt(Dt(lg_v)), tdt = ToDt(Dt(tg_v));
  const int64_t rows = Sh(lg_v)[0], vocab = Sh(lg_v)[1];
  const int64_t ignore = l.attrs.GetInt("ignore_index", -100);
  const void* lg = Ptr(lg_v);
  const void* t = Ptr(tg_v);
  float* ws = static_cast<float*>(scratch_);
  cudaStream_t s = stream_;
  if (fwd) {
    float* loss = static_cast<float*>(Ptr(out[0]));
    float* lse = static_cast<float*>(Ptr(out[1]));
    calls_.push_back([=]() {
      return CudaErr(kern::CrossEntropyForward(ldt, tdt, rows, vocab, lg, t, ignore, lse, ws, loss, s),
                     "cross_entropy");
    });
    return absl::OkStatus();
  }
  const float* dl = static_cast<const float*>(Ptr(in[0]));
  if (l.kind == LaunchKind::kCrossEntropyBackward) {
    const float* lse = static_cast<const float*>(Ptr(in[3]));
    void* o = Ptr(out[0]);
    calls_.push_back([=]() {
      return CudaErr(kern::CrossEntropyBackward(ldt, tdt, rows, vocab, dl, lg, t, lse, ignore, o, ws, s),
                     "cross_entropy_backward");
    });
    return absl::OkStatus();
  }
  float* loss = static_cast<float*>(Ptr(out[0]));
  float* lse = static_cast<float*>(Ptr(out[1]));
  void* o = Ptr(out[2]);
  calls_.push_back([=]() {
    return CudaErr(kern::CrossEntropyFused(ldt, tdt, rows, vocab, dl, lg, t, ignore, lse, loss, o, ws, s),
                   "cross_entropy_fused");
  });
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
