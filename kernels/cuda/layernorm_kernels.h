// Internal: raw launchers of the layernorm backward kernels
// (layernorm_kernels.cu, layernorm_vec_kernels.cu). Only layernorm.cc calls
// these, after validating arguments; this header includes no Loom or Abseil
// header so that nvcc needs nothing outside this folder.
// `bf16`: 1 when dy/x/dx are bf16, 0 when f32. Each returns the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace loom::kernels::cuda::launch {

// Partial rows the workspace holds: min(rows, 512), each 2 * cols floats (dw, db).
int64_t LayerNormBwdParts(int64_t rows);
cudaError_t LayerNormBwd(int bf16, int64_t rows, int64_t cols, const void* dy, const void* x, const float* w,
                         const float* mean, const float* rstd, const void* dres, void* dx, float* dw, float* db,
                         float* workspace, cudaStream_t s);

// The vectorised bf16 backward (layernorm_vec_kernels.cu): cols % 8 == 0, cols <= 1024,
// 16-byte aligned dy/x/weight/dres/dx. Writes at most max_parts partial rows
// (2 * cols floats each: dw, db) and says how many in *parts_used.
bool LayerNormBwdVecApplies(int bf16, int64_t cols, const void* dy, const void* x, const float* w, const void* dres,
                            const void* dx);
cudaError_t LayerNormBwdVec(int64_t rows, int64_t cols, int64_t max_parts, const void* dy, const void* x,
                            const float* w, const float* mean, const float* rstd, const void* dres, void* dx,
                            float* part, int64_t* parts_used, cudaStream_t s);

}  // namespace loom::kernels::cuda::launch
