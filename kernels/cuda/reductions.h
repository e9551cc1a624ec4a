// Column sums and the multi-tensor gradient norm over raw device pointers
// (dtype_code.h). Both reduce through fixed partitions and fixed-order
// combines: the same inputs give the same bits on every run.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

// out[c] = sum over r of x[r, c] (x: xdt, out: odt); a linear's bias gradient.
// bf16 x with cols % 8 == 0 and a 16-byte aligned x: 16-byte loads, 8 rows in
// flight per thread; otherwise one column per thread. workspace:
// SumRowsWorkspaceFloats(rows, cols) floats.
int64_t SumRowsWorkspaceFloats(int64_t rows, int64_t cols);
int SumRows(Dt xdt, Dt odt, int64_t rows, int64_t cols, const void* x, void* out, float* workspace, Stream s);

// out[r] = sum (kind kRowSum) or max (kRowMax) of x[r, 0..cols) (x: xdt,
// out: odt; f32 accumulation). One block per row, a fixed-order tree within
// it: the same bits on every run. The trailing-axes sum and max of a
// parallel program (a vocabulary-parallel loss); rows = 1 reduces all.
enum RowReduceKind : int { kRowSum = 0, kRowMax = 1 };
int RowReduce(RowReduceKind kind, Dt xdt, Dt odt, int64_t rows, int64_t cols, const void* x, void* out, Stream s);

// out[0] = sqrt(sum of squares of every tensor), in one launch over 64 Ki-element
// chunks of every tensor (16-byte loads where a tensor is aligned), then a
// fixed-order sum of the per-chunk partials (partials: the total of
// GradNormChunks over the tensors, floats). The device tables come from
// GradNormUpload, once.
struct GradNormEntry {
  const void* x = nullptr;
  int64_t numel = 0;
  int dt = kF32;  // kF32 or kBF16
};
int64_t GradNormChunks(int64_t n);
// Allocates and fills the device tables (synchronous: call outside capture).
int GradNormUpload(const GradNormEntry* host_entries, int n, void** dev_entries, void** dev_chunks,
                   int64_t* num_chunks);
int GradNormMulti(const void* dev_entries, const void* dev_chunks, int64_t num_chunks, float* partials, float* out,
                  Stream s);

}  // namespace loom::kernels::cuda::kern
