// Embedding forward and backward (embedding.h): grid-stride loops over the
// rows x cols output; the sorted backward sorts (id, row) pairs with CUB's
// radix sort and sums each id's rows in row order.
#include "kernels/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>

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

__global__ void VocabOnehotK(int idt, int odt, int vdt, int64_t rows, int64_t cols, int64_t rank, int64_t ignore,
                             const void* ids, void* onehot, void* valid) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t id = LdId(ids, idt, r);
    St(onehot, odt, i, id != ignore && id - rank * cols == c ? 1.f : 0.f);
    if (c == 0) St(valid, vdt, r, id == ignore ? 0.f : 1.f);
  }
}

// The sort's input: key = the id (out-of-range ids: `vocab`, which sorts
// after every valid id and is skipped), value = the row.
__global__ void SortPairsInK(int idt, int64_t rows, int64_t vocab, const void* ids, uint32_t* keys, int32_t* vals) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = LdId(ids, idt, r);
    keys[r] = static_cast<uint32_t>(id >= 0 && id < vocab ? id : vocab);
    vals[r] = static_cast<int32_t>(r);
  }
}

// Block b handles sorted position b when it starts a run of equal ids: every
// thread takes columns c, c + blockDim, ... and adds the run's dy rows in
// ascending row order (the radix sort is stable), then stores dw[id, c]. A
// fixed order and one writer per element: no atomics, the same bits every run.
__global__ void SumRunsK(int dydt, int64_t rows, int64_t cols, int64_t vocab, const void* dy, const uint32_t* keys,
                         const int32_t* vals, float* dw) {
  for (int64_t b = blockIdx.x; b < rows; b += gridDim.x) {
    const uint32_t id = keys[b];
    if (id >= vocab || (b > 0 && keys[b - 1] == id)) continue;
    int64_t end = b + 1;
    while (end < rows && keys[end] == id) ++end;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float acc = 0.f;
      for (int64_t r = b; r < end; ++r) acc += Ld(dy, dydt, int64_t(vals[r]) * cols + c);
      dw[int64_t(id) * cols + c] = acc;
    }
  }
}

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Key bits the sort looks at: enough for `vocab` (the out-of-range key).
int KeyBits(int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// The sorted backward's workspace: keys (uint32) and rows (int32) before and
// after the sort, then CUB's temporary storage.
struct SortedLayout {
  size_t pairs = 0;  // bytes of one of the four 4-byte [rows] arrays, aligned
  size_t cub = 0;    // CUB's temporary storage
  size_t total() const { return 4 * pairs + cub; }
};

int SortedWorkspace(int64_t rows, int64_t vocab, SortedLayout* l) {
  if (rows > INT32_MAX || vocab >= INT32_MAX) return static_cast<int>(cudaErrorInvalidValue);
  l->pairs = AlignUp(sizeof(uint32_t) * static_cast<size_t>(rows));
  l->cub = 0;
  if (rows == 0) return 0;
  return static_cast<int>(cub::DeviceRadixSort::SortPairs(
      nullptr, l->cub, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(rows), 0,
      KeyBits(vocab)));
}

int EmbeddingBackwardSorted(Dt dydt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy,
                            const void* ids, float* dw, void* workspace, size_t workspace_bytes, cudaStream_t s) {
  SortedLayout l;
  if (int e = SortedWorkspace(rows, vocab, &l)) return e;
  if (workspace_bytes < l.total() || (rows > 0 && workspace == nullptr)) return static_cast<int>(cudaErrorInvalidValue);
  cudaError_t e = cudaMemsetAsync(dw, 0, sizeof(float) * vocab * cols, s);
  if (e != cudaSuccess || rows == 0) return static_cast<int>(e);
  char* w = static_cast<char*>(workspace);
  uint32_t* keys_in = reinterpret_cast<uint32_t*>(w);
  uint32_t* keys_out = reinterpret_cast<uint32_t*>(w + l.pairs);
  int32_t* vals_in = reinterpret_cast<int32_t*>(w + 2 * l.pairs);
  int32_t* vals_out = reinterpret_cast<int32_t*>(w + 3 * l.pairs);
  SortPairsInK<<<Blocks(rows), kThreads, 0, s>>>(idt, rows, vocab, ids, keys_in, vals_in);
  if (int err = Err()) return err;
  size_t cub_bytes = l.cub;
  e = cub::DeviceRadixSort::SortPairs(w + 4 * l.pairs, cub_bytes, keys_in, keys_out, vals_in, vals_out,
                                      static_cast<int>(rows), 0, KeyBits(vocab), s);
  if (e != cudaSuccess) return static_cast<int>(e);
  const int blocks = static_cast<int>(rows < 65536 ? rows : 65536);
  SumRunsK<<<blocks, kThreads, 0, s>>>(dydt, rows, cols, vocab, dy, keys_out, vals_out, dw);
  return Err();
}

}  // namespace

int Embedding(Dt wdt, Dt odt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* w, const void* ids,
              void* out, Stream s) {
  EmbeddingK<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(s)>>>(wdt, odt, idt, rows, cols, vocab,
                                                                                 w, ids, out);
  return Err();
}

int VocabOnehot(Dt idt, Dt odt, Dt vdt, int64_t rows, int64_t cols, int64_t rank, int64_t ignore_index,
                const void* ids, void* onehot, void* valid, Stream s) {
  VocabOnehotK<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(s)>>>(idt, odt, vdt, rows, cols, rank,
                                                                                   ignore_index, ids, onehot, valid);
  return Err();
}

int EmbeddingBackwardWorkspaceBytes(EmbeddingBwdMode mode, int64_t rows, int64_t vocab, size_t* bytes) {
  *bytes = 0;
  if (mode == kEmbBwdAtomic) return 0;
  SortedLayout l;
  if (int e = SortedWorkspace(rows, vocab, &l)) return e;
  *bytes = l.total();
  return 0;
}

int EmbeddingBackward(Dt dydt, Dt idt, int64_t rows, int64_t cols, int64_t vocab, const void* dy, const void* ids,
                      float* dw, Stream s, EmbeddingBwdMode mode, void* workspace, size_t workspace_bytes) {
  cudaStream_t st = static_cast<cudaStream_t>(s);
  if (mode == kEmbBwdSorted)
    return EmbeddingBackwardSorted(dydt, idt, rows, cols, vocab, dy, ids, dw, workspace, workspace_bytes, st);
  cudaError_t e = cudaMemsetAsync(dw, 0, sizeof(float) * vocab * cols, st);
  if (e != cudaSuccess) return static_cast<int>(e);
  EmbeddingBwdK<<<Blocks(rows * cols), kThreads, 0, st>>>(dydt, idt, rows, cols, vocab, dy, ids, dw);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
