// Argument checks and launches for ops.h; the kernels are in ops_kernels.cu.
#include "kernels/cuda/ops.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops_kernels.h"

namespace loom::cuda {
namespace {

absl::StatusOr<int> Bf16Flag(const char* op, DType dtype) {
  if (dtype == DType::kF32) return 0;
  if (dtype == DType::kBF16) return 1;
  return absl::InvalidArgumentError(absl::StrCat(op, ": dtype: expected f32 or bf16, got ", DTypeName(dtype)));
}

absl::Status NonNull(const char* op, const char* name, const void* p) {
  if (p != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, ": null"));
}

absl::Status NonNegative(const char* op, const char* name, int64_t v) {
  if (v >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, ": must be >= 0, got ", v));
}

absl::Status Launched(cudaError_t e, const char* op) { return CudaStatus(e, op); }

absl::Status RunElementwise(const char* op_name, int op, DType dtype, int64_t n, const void* a, const void* b,
                            void* out, StreamHandle stream) {
  LOOM_ASSIGN_OR_RETURN(int bf16, Bf16Flag(op_name, dtype));
  LOOM_RETURN_IF_ERROR(NonNegative(op_name, "n", n));
  if (n == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(NonNull(op_name, op >= launch::kDGeluTanh ? "x" : "a", a));
  if (op == launch::kAdd || op == launch::kMul || op >= launch::kDGeluTanh)
    LOOM_RETURN_IF_ERROR(NonNull(op_name, op >= launch::kDGeluTanh ? "dy" : "b", b));
  LOOM_RETURN_IF_ERROR(NonNull(op_name, "out", out));
  return Launched(launch::Elementwise(op, bf16, n, a, b, out, AsStream(stream)), op_name);
}

}  // namespace

absl::Status Add(DType dtype, int64_t n, const void* a, const void* b, void* out, StreamHandle stream) {
  return RunElementwise("add", launch::kAdd, dtype, n, a, b, out, stream);
}
absl::Status Mul(DType dtype, int64_t n, const void* a, const void* b, void* out, StreamHandle stream) {
  return RunElementwise("mul", launch::kMul, dtype, n, a, b, out, stream);
}
absl::Status GeluForward(DType dtype, int64_t n, const void* x, void* y, bool tanh_approx, StreamHandle stream) {
  return RunElementwise("gelu", tanh_approx ? launch::kGeluTanh : launch::kGeluErf, dtype, n, x, nullptr, y,
                        stream);
}
absl::Status GeluBackward(DType dtype, int64_t n, const void* x, const void* dy, void* dx, bool tanh_approx,
                          StreamHandle stream) {
  return RunElementwise("gelu_backward", tanh_approx ? launch::kDGeluTanh : launch::kDGeluErf, dtype, n, x, dy,
                        dx, stream);
}

absl::Status LayerNormForward(const LayerNormFwdArgs& a) {
  const char* op = "layernorm";
  LOOM_ASSIGN_OR_RETURN(int bf16, Bf16Flag(op, a.dtype));
  LOOM_RETURN_IF_ERROR(NonNegative(op, "rows", a.rows));
  if (a.cols <= 0) return absl::InvalidArgumentError(absl::StrCat("layernorm: cols: must be > 0, got ", a.cols));
  if (a.rows == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(NonNull(op, "x", a.x));
  LOOM_RETURN_IF_ERROR(NonNull(op, "weight", a.weight));
  LOOM_RETURN_IF_ERROR(NonNull(op, "y", a.y));
  LOOM_RETURN_IF_ERROR(NonNull(op, "mean", a.mean));
  LOOM_RETURN_IF_ERROR(NonNull(op, "rstd", a.rstd));
  if (a.residual) LOOM_RETURN_IF_ERROR(NonNull(op, "x_sum", a.x_sum));
  if (!(a.eps > 0)) return absl::InvalidArgumentError("layernorm: eps: must be > 0");
  return Launched(launch::LayerNormFwd(bf16, a.rows, a.cols, a.x, a.residual, a.residual ? a.x_sum : nullptr,
                                       a.weight, a.bias, a.y, a.mean, a.rstd, a.eps, AsStream(a.stream)),
                  op);
}

int64_t LayerNormBwdWorkspaceFloats(int64_t rows, int64_t cols) {
  return launch::LayerNormBwdParts(rows) * 3 * cols;  // dw, db, dx column sums
}

absl::Status LayerNormBackward(const LayerNormBwdArgs& a) {
  const char* op = "layernorm_backward";
  LOOM_ASSIGN_OR_RETURN(int bf16, Bf16Flag(op, a.dtype));
  LOOM_RETURN_IF_ERROR(NonNegative(op, "rows", a.rows));
  if (a.cols <= 0 || a.cols > 16384)
    return absl::InvalidArgumentError(
        absl::StrCat("layernorm_backward: cols: must be in [1, 16384], got ", a.cols));
  if (a.rows == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(NonNull(op, "dy", a.dy));
  LOOM_RETURN_IF_ERROR(NonNull(op, "x", a.x));
  LOOM_RETURN_IF_ERROR(NonNull(op, "weight", a.weight));
  LOOM_RETURN_IF_ERROR(NonNull(op, "mean", a.mean));
  LOOM_RETURN_IF_ERROR(NonNull(op, "rstd", a.rstd));
  LOOM_RETURN_IF_ERROR(NonNull(op, "dx", a.dx));
  LOOM_RETURN_IF_ERROR(NonNull(op, "dweight", a.dweight));
  LOOM_RETURN_IF_ERROR(NonNull(op, "workspace", a.workspace));
  return Launched(launch::LayerNormBwd(bf16, a.rows, a.cols, a.dy, a.x, a.weight, a.mean, a.rstd, a.dresidual,
                                       a.dx, a.dweight, a.dbias, a.dx_colsum, a.workspace, AsStream(a.stream)),
                  op);
}

absl::Status CrossEntropyForward(DType dtype, int64_t rows, int64_t vocab, const void* logits,
                                 const int32_t* targets, float* losses, float* lse, StreamHandle stream) {
  const char* op = "cross_entropy";
  LOOM_ASSIGN_OR_RETURN(int bf16, Bf16Flag(op, dtype));
  LOOM_RETURN_IF_ERROR(NonNegative(op, "rows", rows));
  if (vocab <= 0) return absl::InvalidArgumentError(absl::StrCat("cross_entropy: vocab: must be > 0, got ", vocab));
  if (rows == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(NonNull(op, "logits", logits));
  LOOM_RETURN_IF_ERROR(NonNull(op, "targets", targets));
  LOOM_RETURN_IF_ERROR(NonNull(op, "losses", losses));
  LOOM_RETURN_IF_ERROR(NonNull(op, "lse", lse));
  return Launched(launch::CrossEntropyFwd(bf16, rows, vocab, logits, targets, losses, lse, AsStream(stream)), op);
}

absl::Status CrossEntropyBackward(DType dtype, int64_t rows, int64_t vocab, const void* logits,
                                  const int32_t* targets, const float* lse, float scale, void* dlogits,
                                  StreamHandle stream) {
  const char* op = "cross_entropy_backward";
  LOOM_ASSIGN_OR_RETURN(int bf16, Bf16Flag(op, dtype));
  LOOM_RETURN_IF_ERROR(NonNegative(op, "rows", rows));
  if (vocab <= 0)
    return absl::InvalidArgumentError(absl::StrCat("cross_entropy_backward: vocab: must be > 0, got ", vocab));
  if (rows == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(NonNull(op, "logits", logits));
  LOOM_RETURN_IF_ERROR(NonNull(op, "targets", targets));
  LOOM_RETURN_IF_ERROR(NonNull(op, "lse", lse));
  LOOM_RETURN_IF_ERROR(NonNull(op, "dlogits", dlogits));
  return Launched(
      launch::CrossEntropyBwd(bf16, rows, vocab, logits, targets, lse, scale, dlogits, AsStream(stream)), op);
}

// ---- AdamW --------------------------------------------------------------------------
absl::StatusOr<std::unique_ptr<AdamWMultiTensor>> AdamWMultiTensor::Create(const std::vector<AdamWTensor>& ts,
                                                                           DType grad_dtype) {
  const char* op = "adamw";
  LOOM_ASSIGN_OR_RETURN(int bf16, Bf16Flag(op, grad_dtype));
  (void)bf16;
  std::vector<launch::AdamWDesc> descs;
  std::vector<launch::AdamWChunk> chunks;
  for (size_t i = 0; i < ts.size(); ++i) {
    const AdamWTensor& t = ts[i];
    std::string name = absl::StrCat("tensors[", i, "]");
    if (t.numel < 0) return absl::InvalidArgumentError(absl::StrCat("adamw: ", name, ".numel: negative"));
    if (t.numel > 0 && (!t.param || !t.grad || !t.m || !t.v))
      return absl::InvalidArgumentError(absl::StrCat("adamw: ", name, ": param, grad, m and v must be set"));
    descs.push_back({t.param, t.grad, t.m, t.v, t.numel, t.decay ? 1 : 0, t.param_bf16});
    for (int64_t s = 0; s < t.numel; s += launch::kAdamWChunk)
      chunks.push_back({static_cast<int32_t>(i), s});
  }
  std::unique_ptr<AdamWMultiTensor> a(new AdamWMultiTensor());
  a->grad_dtype_ = grad_dtype;
  a->num_chunks_ = static_cast<int64_t>(chunks.size());
  if (!descs.empty()) {
    LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&a->table_, descs.size() * sizeof(launch::AdamWDesc)));
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpy(a->table_, descs.data(), descs.size() * sizeof(launch::AdamWDesc),
                                         cudaMemcpyHostToDevice));
  }
  if (!chunks.empty()) {
    LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&a->chunks_, chunks.size() * sizeof(launch::AdamWChunk)));
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpy(a->chunks_, chunks.data(), chunks.size() * sizeof(launch::AdamWChunk),
                                         cudaMemcpyHostToDevice));
  }
  return a;
}

AdamWMultiTensor::~AdamWMultiTensor() {
  if (table_) cudaFree(table_);
  if (chunks_) cudaFree(chunks_);
}

absl::Status AdamWMultiTensor::Step(const AdamWHyper& h, StreamHandle stream) {
  if (h.step < 1) return absl::InvalidArgumentError(absl::StrCat("adamw: step: must be >= 1, got ", h.step));
  if (!(h.eps > 0)) return absl::InvalidArgumentError("adamw: eps: must be > 0");
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  return Launched(launch::AdamW(static_cast<const launch::AdamWDesc*>(table_),
                                static_cast<const launch::AdamWChunk*>(chunks_), num_chunks_,
                                grad_dtype_ == DType::kBF16 ? 1 : 0, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay,
                                static_cast<float>(bc1), static_cast<float>(std::sqrt(bc2)), AsStream(stream)),
                  "adamw");
}

}  // namespace loom::cuda
