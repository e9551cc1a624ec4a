// Embedding lookup and its gradient over raw device pointers (dtype_code.h).
// Ids out of [0, vocab) read as zero rows and add nothing to the gradient.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

// out[i, :] = w[ids[i], :]  (rows = number of ids, cols = C); w, out: wdt, odt.
int Embedding(Dt wdt, Dt odt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* w,
              const void* ids, void* out, Stream s);
// dw[V, C] (f32) = 0, then dw[ids[i], :] += dy[i, :]. f32 atomics: the one
// kernel of a training step whose bits may differ run to run.
int EmbeddingBackward(Dt dydt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy,
                      const void* ids, float* dw, Stream s);

}  // namespace loom::kernels::cuda::kern
