// CUDA kernels for the ops of a GPT training step (sm_90), over raw device
// pointers so that an executor can call them on its own buffers and streams.
//
// dtype is kF32 or kBF16 for activations (bf16 is computed in f32 and rounded
// once on store); norm weights, statistics, losses and optimizer state are f32.
// Every function validates its arguments (InvalidArgument naming the argument),
// launches asynchronously on `stream` and returns the launch error.
//
// These are a library, not registry kernels: the op registry's RunOp allocates
// outputs through Tensor::Empty with no device allocator and KernelFn carries no
// stream, so CUDA entries would not fit its contract cleanly (see docs/perf.md).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::cuda {

// ---- Elementwise over n elements (same shapes, contiguous) -------------------
absl::Status Add(DType dtype, int64_t n, const void* a, const void* b, void* out, StreamHandle stream);
absl::Status Mul(DType dtype, int64_t n, const void* a, const void* b, void* out, StreamHandle stream);
// gelu(x): tanh_approx true: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))), else 0.5x(1+erf(x/sqrt2)).
absl::Status GeluForward(DType dtype, int64_t n, const void* x, void* y, bool tanh_approx,
                         StreamHandle stream);
// dx = dy * gelu'(x)
absl::Status GeluBackward(DType dtype, int64_t n, const void* x, const void* dy, void* dx, bool tanh_approx,
                          StreamHandle stream);

// ---- LayerNorm over the last dim of [rows, cols] ------------------------------
// With residual: x_sum = x + residual (written, the residual stream) and the
// norm is taken of x_sum. mean/rstd [rows] are saved for the backward.
struct LayerNormFwdArgs {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  const void* x = nullptr;
  const void* residual = nullptr;  // optional
  void* x_sum = nullptr;           // required when residual is given
  const float* weight = nullptr;   // [cols]
  const float* bias = nullptr;     // [cols], optional
  void* y = nullptr;
  float* mean = nullptr;  // [rows]
  float* rstd = nullptr;  // [rows]
  float eps = 1e-5f;
  StreamHandle stream = nullptr;
};
absl::Status LayerNormForward(const LayerNormFwdArgs& a);

// dx = LayerNorm'(dy) (+ dresidual: a gradient reaching the norm's input from
// another path, e.g. the residual branch), dweight/dbias summed over rows
// deterministically through `workspace` (LayerNormBwdWorkspaceFloats floats).
// dx_colsum (optional): the column sums of dx as stored, i.e. the bias gradient
// of a linear whose output is the norm's input (saves a separate pass over dx).
struct LayerNormBwdArgs {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  const void* dy = nullptr;
  const void* x = nullptr;  // the normalised input (x_sum when the forward had a residual)
  const float* weight = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const void* dresidual = nullptr;  // optional, added to dx
  void* dx = nullptr;
  float* dweight = nullptr;  // [cols]
  float* dbias = nullptr;    // [cols], optional
  float* dx_colsum = nullptr;  // [cols], optional
  float* workspace = nullptr;
  StreamHandle stream = nullptr;
};
int64_t LayerNormBwdWorkspaceFloats(int64_t rows, int64_t cols);
absl::Status LayerNormBackward(const LayerNormBwdArgs& a);

// ---- Softmax cross-entropy over [rows, vocab] logits --------------------------
// losses[r] = logsumexp(logits[r]) - logits[r, t[r]]; lse[r] saved. t < 0: ignored row (loss 0).
absl::Status CrossEntropyForward(DType dtype, int64_t rows, int64_t vocab, const void* logits,
                                 const int32_t* targets, float* losses, float* lse, StreamHandle stream);
// dlogits = scale * (softmax(logits) - onehot(t)); ignored rows get 0.
absl::Status CrossEntropyBackward(DType dtype, int64_t rows, int64_t vocab, const void* logits,
                                  const int32_t* targets, const float* lse, float scale, void* dlogits,
                                  StreamHandle stream);

// ---- AdamW over many tensors in one launch -----------------------------------
struct AdamWTensor {
  float* param = nullptr;      // f32 master weights
  const void* grad = nullptr;  // grad_dtype
  float* m = nullptr;
  float* v = nullptr;
  int64_t numel = 0;
  bool decay = true;            // apply weight decay
  void* param_bf16 = nullptr;   // optional bf16 copy of the updated param
};
struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  int64_t step = 1;  // 1-based, for bias correction
};
// PyTorch's AdamW: p -= lr*wd*p (decay tensors); m,v moments; p -= lr/bc1 * m/(sqrt(v)/sqrt(bc2)+eps).
class AdamWMultiTensor {
 public:
  // Uploads the tensor table (and its chunk table) to the current device once.
  static absl::StatusOr<std::unique_ptr<AdamWMultiTensor>> Create(const std::vector<AdamWTensor>& tensors,
                                                                 DType grad_dtype);
  ~AdamWMultiTensor();
  // One kernel launch updates every tensor.
  absl::Status Step(const AdamWHyper& h, StreamHandle stream);
  int64_t num_chunks() const { return num_chunks_; }

 private:
  AdamWMultiTensor() = default;
  void* table_ = nullptr;   // device AdamWTensor[]
  void* chunks_ = nullptr;  // device {int32 tensor, int64 start}[]
  int64_t num_chunks_ = 0;
  DType grad_dtype_ = DType::kF32;
};

}  // namespace loom::cuda
