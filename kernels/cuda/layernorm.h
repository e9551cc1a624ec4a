// LayerNorm backward over [rows, cols] on the GPU (sm_90), over raw device
// pointers so that an executor can call it on its own buffers and stream.
// (The forward is generated per shape: kernels/cuda/codegen/rowwise.h.)
//
// dtype is kF32 or kBF16 for dy, x, dresidual and dx (bf16 is computed in f32
// and rounded once on store); the weight, statistics and the weight / bias
// gradients are f32. LayerNormBackward validates its arguments
// (InvalidArgument naming the argument), launches asynchronously on `stream`
// and returns the launch error.
//
// Kernels by shape: bf16 rows of at most 1024 columns with cols % 8 == 0 and
// 16-byte aligned operands take the vectorised kernel (a warp per row, 16-byte
// accesses); other rows of at most 1024 columns a warp per row; wider rows a
// block per row. dweight/dbias are summed through per-block partial rows and a
// fixed-order reduction: deterministic, no atomics.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::kernels::cuda {

// dx = LayerNorm'(dy) (+ dresidual: a gradient reaching the norm's input from
// another path, e.g. the residual branch), dweight/dbias summed over rows
// through `workspace` (LayerNormBwdWorkspaceFloats floats).
struct LayerNormBwdArgs {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  const void* dy = nullptr;
  const void* x = nullptr;  // the normalised input (the sum when the forward added a residual)
  const float* weight = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const void* dresidual = nullptr;  // optional, added to dx
  void* dx = nullptr;
  float* dweight = nullptr;  // [cols]
  float* dbias = nullptr;    // [cols], optional
  float* workspace = nullptr;
  StreamHandle stream = nullptr;
};
int64_t LayerNormBwdWorkspaceFloats(int64_t rows, int64_t cols);
absl::Status LayerNormBackward(const LayerNormBwdArgs& a);

}  // namespace loom::kernels::cuda
