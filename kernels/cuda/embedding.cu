// Embedding forward and backward (embedding.h): grid-stride loops over the
// rows x cols output.
#include "kernels/cuda/embedding.h"

#include "kernels/cuda/device_util.cuh"

namespace loom::kernels::cuda::kern {
namespace {

__global__ void EmbeddingK(int wdt, int odt, int idt, int64_t rows, int64_t cols, int64_t vocab, const void* w,
                           const void* ids, void* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t id = LdId(ids, idt, r);
    St(out, odt, i, id >= 0 && id < vocab ? Ld(w, wdt, id * cols + c) : 0.f);
  }
}
__global__ void EmbeddingBwdK(int dydt, int idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy,
                              const void* ids, float* dw) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t id = LdId(ids, idt, r);
    if (id >= 0 && id < vocab) atomicAdd(dw + id * cols + c, Ld(dy, dydt, i));
  }
}

}  // namespace

int Embedding(Dt wdt, Dt odt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* w, const void* ids,
              void* out, Stream s) {
  EmbeddingK<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(s)>>>(wdt, odt, idt, rows, cols, vocab,
                                                                                 w, ids, out);
  return Err();
}

int EmbeddingBackward(Dt dydt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy, const void* ids,
                      float* dw, Stream s) {
  cudaError_t e = cudaMemsetAsync(dw, 0, sizeof(float) * vocab * cols, static_cast<cudaStream_t>(s));
  if (e != cudaSuccess) return static_cast<int>(e);
  EmbeddingBwdK<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(s)>>>(dydt, idt, rows, cols, vocab,
                                                                                    dy, ids, dw);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
