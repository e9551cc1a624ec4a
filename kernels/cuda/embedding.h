// Embedding lookup and its gradient over raw device pointers (dtype_code.h).
// Ids out of [0, vocab) read as zero rows and add nothing to the gradient.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/dtype_code.h"

namespace loom::kernels::cuda::kern {

// out[i, :] = w[ids[i], :]  (rows = number of ids, cols = C); w, out: wdt, odt.
int Embedding(Dt wdt, Dt odt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* w,
              const void* ids, void* out, Stream s);
// Which embedding backward runs (both: dw[V, C] (f32) = 0, then
// dw[ids[i], :] += dy[i, :]):
//   kEmbBwdAtomic  one thread per dy element, f32 atomicAdd into dw: the
//                  order of the additions into one id's row varies, so the
//                  last bits of dw may differ run to run. No workspace.
//   kEmbBwdSorted  deterministic, no atomics: (id, row) pairs are sorted by
//                  id with CUB's stable radix sort, then one block per
//                  distinct id adds its rows in ascending row order (threads
//                  over columns) and stores dw[id, :] once. Costs the sort
//                  (key bits: those of vocab) and a workspace
//                  (EmbeddingBackwardWorkspaceBytes); an id repeated n times
//                  is summed by one block serially over its n rows. Needs
//                  rows < 2^31 and vocab < 2^31 - 1.
enum EmbeddingBwdMode : int { kEmbBwdAtomic = 0, kEmbBwdSorted = 1 };

// The workspace EmbeddingBackward(mode) needs for `rows` ids into a
// `vocab`-row table, in *bytes (0 for kEmbBwdAtomic). Returns a CUDA error
// code: CUB's size query needs a device.
int EmbeddingBackwardWorkspaceBytes(EmbeddingBwdMode mode, int64_t rows, int64_t vocab, size_t* bytes);
// workspace: at least EmbeddingBackwardWorkspaceBytes bytes, 256-byte aligned
// (kEmbBwdSorted; less is cudaErrorInvalidValue). Allocates nothing, so it
// can be captured in a CUDA graph.
int EmbeddingBackward(Dt dydt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy,
                      const void* ids, float* dw, Stream s, EmbeddingBwdMode mode = kEmbBwdAtomic,
                      void* workspace = nullptr, size_t workspace_bytes = 0);

// The one-hot rows of a vocabulary-parallel rank (kernels/spmd_ops.cc
// vocab_onehot): this rank holds ids [rank * cols, (rank + 1) * cols);
// onehot[i, j] = 1 where ids[i] == rank * cols + j, else 0 (onehot: odt,
// rows x cols); valid[i] = 0 where ids[i] == ignore_index, else 1 (vdt).
int VocabOnehot(Dt idt, Dt odt, Dt vdt, int64_t rows, int64_t cols, int64_t rank, int64_t ignore_index,
                const void* ids, void* onehot, void* valid, Stream s);

}  // namespace loom::kernels::cuda::kern
