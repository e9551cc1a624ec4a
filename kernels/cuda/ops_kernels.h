// Internal: raw launchers of the kernels in ops_kernels.cu (compiled by nvcc).
// Only ops.cc calls these, after validating arguments; this header includes no
// Loom or Abseil header so that nvcc needs nothing outside this folder.
// `bf16`: 1 when activations are bf16, 0 when f32. Each returns the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace loom::cuda::launch {

enum ElementwiseOp : int { kAdd = 0, kMul = 1, kGeluTanh = 2, kGeluErf = 3, kDGeluTanh = 4, kDGeluErf = 5 };
// out = op(a, b); for gelu b is unused; for dgelu a = x, b = dy.
cudaError_t Elementwise(int op, int bf16, int64_t n, const void* a, const void* b, void* out, cudaStream_t s);

cudaError_t LayerNormFwd(int bf16, int64_t rows, int64_t cols, const void* x, const void* residual,
                         void* x_sum, const float* w, const float* b, void* y, float* mean, float* rstd,
                         float eps, cudaStream_t s);
int64_t LayerNormBwdParts(int64_t rows);
cudaError_t LayerNormBwd(int bf16, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                         const float* mean, const float* rstd, const void* dres, void* dx, float* dw, float* db,
                         float* dsum, float* workspace, cudaStream_t s);

// The vectorised bf16 forward (layernorm_vec_kernels.cu): cols % 8 == 0, cols <= 1024,
// 16-byte aligned x/residual/x_sum/weight/bias/y.
bool LayerNormFwdVecApplies(int bf16, int64_t cols, const void* x, const void* res, const void* xsum,
                            const float* w, const float* b, const void* y);
cudaError_t LayerNormFwdVec(int64_t rows, int64_t cols, const void* x, const void* res, void* xsum, const float* w,
                            const float* b, void* y, float* mean, float* rstd, float eps, cudaStream_t s);
// The vectorised bf16 backward (layernorm_vec_kernels.cu): cols % 8 == 0, cols <= 1024,
// 16-byte aligned dy/x/weight/dres/dx. Writes at most max_parts partial rows
// ((colsum ? 3 : 2) * cols floats each: dw, db[, sum of dx]) and says how many in *parts_used.
bool LayerNormBwdVecApplies(int bf16, int64_t cols, const void* dy, const void* x, const float* w, const void* dres,
                            const void* dx);
cudaError_t LayerNormBwdVec(int64_t rows, int64_t cols, int64_t max_parts, const void* dy, const void* x,
                            const float* w, const float* mean, const float* rstd, const void* dres, void* dx,
                            bool colsum, float* part, int64_t* parts_used, cudaStream_t s);

cudaError_t CrossEntropyFwd(int bf16, int64_t rows, int64_t vocab, const void* logits, const int32_t* t,
                            float* losses, float* lse, cudaStream_t s);
cudaError_t CrossEntropyBwd(int bf16, int64_t rows, int64_t vocab, const void* logits, const int32_t* t,
                            const float* lse, float scale, void* dlogits, cudaStream_t s);

struct AdamWDesc {
  float* p;
  const void* g;
  float* m;
  float* v;
  int64_t n;
  int32_t decay;
  void* p_bf16;
};
struct AdamWChunk {
  int32_t tensor;
  int64_t start;
};
constexpr int64_t kAdamWChunk = 16384;
cudaError_t AdamW(const AdamWDesc* descs, const AdamWChunk* chunks, int64_t num_chunks, int grad_bf16, float lr,
                  float beta1, float beta2, float eps, float wd, float bc1, float bc2_sqrt, cudaStream_t s);

}  // namespace loom::cuda::launch
