// Softmax cross-entropy over [rows, vocab] logits, raw device pointers
// (dtype_code.h): logits / dlogits kF32 or kBF16, targets kI32 or kI64. A row
// whose target is ignore_index or outside [0, vocab) is ignored: its loss and
// gradient are 0 and it is not counted. Reductions run in a fixed order
// (deterministic).
//
// bf16 rows with vocab % 8 == 0 and 16-byte aligned logits (and dlogits) take
// the vectorised kernels (16-byte loads, fast exponentials: ~2 ulp, far inside
// bf16's resolution); other shapes the one-element-per-thread kernels.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

// lse[r], row_loss[r] (0 for ignored rows), then loss[0] = sum(row_loss) /
// max(1, valid rows). row_loss: rows floats of workspace.
int CrossEntropyForward(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const void* logits, const void* targets,
                        int64_t ignore_index, float* lse, float* row_loss, float* loss, Stream s);
// dlogits = dloss[0] / valid rows * (softmax - onehot); ignored rows 0.
// workspace: 1 float (the valid count).
int CrossEntropyBackward(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const float* dloss, const void* logits,
                         const void* targets, const float* lse, int64_t ignore_index, void* dlogits,
                         float* workspace, Stream s);

// Both for a training step whose dloss is ready before the forward would run:
// lse and loss as CrossEntropyForward, dlogits as CrossEntropyBackward, one
// block per row reading the row of logits from memory once (the vectorised
// bf16 case: the row stays in shared memory between the max/sum pass and the
// gradient pass up to vocab 102400; beyond that the gradient pass re-reads it,
// mostly from L2). Other shapes run the two kernels in turn (same results).
// workspace: rows + 1 floats.
int CrossEntropyFused(Dt ldt, Dt tdt, int64_t rows, int64_t vocab, const float* dloss, const void* logits,
                      const void* targets, int64_t ignore_index, float* lse, float* loss, void* dlogits,
                      float* workspace, Stream s);

}  // namespace loom::kernels::cuda::kern
