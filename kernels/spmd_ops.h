// Rank-dependent helpers of the ops in kernels/spmd_ops.cc, for the lowering
// that binds them to a communicator's rank (compiler/lowering.cc).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "base/tensor.h"

namespace loom::kernels {

// vocab_onehot for the rank holding vocabulary block `rank` (of
// onehot.shape()[1] entries): onehot f32[N, c] and valid f32[N] (0 where the
// target is ignore_index).
absl::Status VocabOnehotBlock(const Tensor& targets, Tensor& onehot, Tensor& valid, int64_t rank,
                              int64_t ignore_index);

}  // namespace loom::kernels
