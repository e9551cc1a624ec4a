// The storage dtype codes and stream handle of the raw-pointer CUDA kernels
// (embedding.h, reductions.h, cross_entropy.h, rmsnorm.h, rope.h, fill.h).
// Those headers include no Loom or Abseil header: nvcc compiles them.
//
// Every raw kernel function launches asynchronously on its stream (a
// cudaStream_t passed as Stream) and returns the launch error as an int
// cudaError_t value (0 = success); none synchronises with the host, so every
// one of them can be captured in a CUDA graph.
#pragma once

namespace loom::kernels::cuda::kern {

// Storage dtype of an operand: floating kF32 / kBF16, ids kI32 / kI64.
enum Dt : int { kF32 = 0, kBF16 = 1, kI32 = 2, kI64 = 3 };

using Stream = void*;

}  // namespace loom::kernels::cuda::kern
