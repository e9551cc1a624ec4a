// Column sums and the multi-tensor gradient norm (reductions.h).
#include "kernels/cuda/reductions.h"

#include <algorithm>
#include <vector>

#include "kernels/cuda/device_util.cuh"

namespace loom::kernels::cuda::kern {
namespace {

// ---- column sums -----------------------------------------------------------------
__global__ void SumRowsPartK(int xdt, int64_t rows, int64_t cols, int64_t chunk, const void* x, float* ws) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float s = 0.f;
  for (int64_t r = r0; r < r1; ++r) s += Ld(x, xdt, r * cols + c);
  ws[blockIdx.y * cols + c] = s;
}
// bf16 columns, cols % 8 == 0, 16-byte aligned: a block covers 256 columns
// (32 lanes x 8 bf16 in one 16-byte load) and one chunk of rows (>= 128), its
// 8 warps taking every 8th row of the chunk; the warps' sums meet in shared
// memory in a fixed order and the block writes one partial row.
__global__ void __launch_bounds__(256) SumRowsVecPartK(int64_t rows, int64_t cols, int64_t chunk,
                                                       const bf16* __restrict__ x, float* __restrict__ ws) {
  __shared__ float sh[8][256 + 4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = blockIdx.x * 256 + 8 * lane;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float acc[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = 0.f;
  if (c0 < cols) {
    int64_t r = r0 + warp;
    // Eight rows' loads in flight per thread before the adds.
    for (; r + 56 < r1; r += 64) {
      uint4 u[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) u[q] = *reinterpret_cast<const uint4*>(x + (r + 8 * q) * cols + c0);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u[q]);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __bfloat1622float2(h[k]);
          acc[2 * k] += f.x;
          acc[2 * k + 1] += f.y;
        }
      }
    }
    for (; r < r1; r += 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(x + r * cols + c0);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(h[k]);
        acc[2 * k] += f.x;
        acc[2 * k + 1] += f.y;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) sh[warp][8 * lane + k] = acc[k];
  __syncthreads();
  const int64_t c = blockIdx.x * 256 + threadIdx.x;
  if (c < cols) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) t += sh[w][threadIdx.x];
    ws[blockIdx.y * cols + c] = t;
  }
}
// ---- grad norm ---------------------------------------------------------------------
// Multi-tensor: one block per chunk of kNormChunk elements of one tensor, the
// chunk's sum of squares into partials[chunk] (16-byte loads where the tensor
// is aligned), then SqrtSumK over the chunks in a fixed order.
constexpr int64_t kNormChunk = 65536;
struct NormChunk {
  int32_t entry;
  int64_t start;
};
__global__ void __launch_bounds__(256) SumSquaresMultiK(const GradNormEntry* entries, const NormChunk* chunks,
                                                        float* partials) {
  const NormChunk ch = chunks[blockIdx.x];
  const GradNormEntry e = entries[ch.entry];
  const int64_t end = min(e.numel, ch.start + kNormChunk);
  float s = 0.f;
  // Chunk starts are multiples of kNormChunk elements: an aligned tensor has every chunk aligned.
  const bool aligned = (reinterpret_cast<uintptr_t>(e.x) & 15) == 0;
  int64_t tail = ch.start;  // where the one-element loop starts
  if (e.dt == kF32) {
    const float* x = static_cast<const float*>(e.x);
    if (aligned) {
      for (int64_t i = ch.start + 4 * int64_t(threadIdx.x); i + 3 < end; i += 4 * int64_t(blockDim.x)) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      tail = ch.start + ((end - ch.start) & ~int64_t(3));
    }
    for (int64_t k = tail + threadIdx.x; k < end; k += blockDim.x) s += x[k] * x[k];
  } else {
    const bf16* x = static_cast<const bf16*>(e.x);
    if (aligned) {
      for (int64_t i = ch.start + 8 * int64_t(threadIdx.x); i + 7 < end; i += 8 * int64_t(blockDim.x)) {
        const uint4 u = *reinterpret_cast<const uint4*>(x + i);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __bfloat1622float2(h[k]);
          s += f.x * f.x + f.y * f.y;
        }
      }
      tail = ch.start + ((end - ch.start) & ~int64_t(7));
    }
    for (int64_t k = tail + threadIdx.x; k < end; k += blockDim.x) {
      const float v = __bfloat162float(x[k]);
      s += v * v;
    }
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// One block of kRowThreads per row (grid-stride over rows): a strided pass
// per thread, then warp shuffles and one combine over the warps' partials.
constexpr int kRowThreads = 256;
__global__ void __launch_bounds__(kRowThreads) RowReduceK(int kind, int xdt, int odt, int64_t rows, int64_t cols,
                                                          const void* x, void* out) {
  __shared__ float part[kRowThreads / 32];
  const float init = kind == kRowMax ? -INFINITY : 0.f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float acc = init;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = Ld(x, xdt, r * cols + c);
      acc = kind == kRowMax ? fmaxf(acc, v) : acc + v;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float u = __shfl_down_sync(0xffffffffu, acc, o);
      acc = kind == kRowMax ? fmaxf(acc, u) : acc + u;
    }
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
      acc = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : init;
      for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_down_sync(0xffffffffu, acc, o);
        acc = kind == kRowMax ? fmaxf(acc, u) : acc + u;
      }
      if (threadIdx.x == 0) St(out, odt, r, acc);
    }
    __syncthreads();
  }
}

__global__ void SqrtSumK(const float* partials, int64_t total, float* out) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) s += partials[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) out[0] = sqrtf(s);
}

}  // namespace

int64_t SumRowsWorkspaceFloats(int64_t rows, int64_t cols) { return SumParts(rows) * cols; }

int SumRows(Dt xdt, Dt odt, int64_t rows, int64_t cols, const void* x, void* out, float* ws, Stream s) {
  cudaStream_t st = static_cast<cudaStream_t>(s);
  if (xdt == kBF16 && cols % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 && rows > 0) {
    // Chunks of >= 128 rows, parts <= SumParts(rows): within SumRowsWorkspaceFloats.
    const int64_t sp = SumParts(rows);
    const int64_t chunk = std::max<int64_t>(128, (rows + sp - 1) / sp), parts = (rows + chunk - 1) / chunk;
    dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(parts));
    SumRowsVecPartK<<<grid, 256, 0, st>>>(rows, cols, chunk, static_cast<const bf16*>(x), ws);
    ColumnPartialsSumK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, st>>>(odt, parts, cols, ws, out);
    return Err();
  }
  const int64_t parts = SumParts(rows), chunk = (rows + parts - 1) / parts;
  dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(parts));
  SumRowsPartK<<<grid, kThreads, 0, st>>>(xdt, rows, cols, chunk, x, ws);
  ColumnPartialsSumK<<<static_cast<unsigned>((cols + 31) / 32), 512, 0, st>>>(odt, parts, cols, ws, out);
  return Err();
}

int64_t GradNormChunks(int64_t n) { return (n + kNormChunk - 1) / kNormChunk; }

int GradNormUpload(const GradNormEntry* host_entries, int n, void** dev_entries, void** dev_chunks,
                   int64_t* num_chunks) {
  std::vector<NormChunk> chunks;
  for (int t = 0; t < n; ++t)
    for (int64_t st = 0; st < host_entries[t].numel; st += kNormChunk) chunks.push_back({t, st});
  *num_chunks = static_cast<int64_t>(chunks.size());
  cudaError_t e = cudaMalloc(dev_entries, sizeof(GradNormEntry) * (n > 0 ? n : 1));
  if (e == cudaSuccess) e = cudaMalloc(dev_chunks, sizeof(NormChunk) * (chunks.empty() ? 1 : chunks.size()));
  if (e == cudaSuccess && n > 0)
    e = cudaMemcpy(*dev_entries, host_entries, sizeof(GradNormEntry) * n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && !chunks.empty())
    e = cudaMemcpy(*dev_chunks, chunks.data(), sizeof(NormChunk) * chunks.size(), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();  // pageable copies may still be in flight
  return static_cast<int>(e);
}

int GradNormMulti(const void* dev_entries, const void* dev_chunks, int64_t num_chunks, float* partials, float* out,
                  Stream s) {
  cudaStream_t st = static_cast<cudaStream_t>(s);
  if (num_chunks > 0)
    SumSquaresMultiK<<<static_cast<unsigned>(num_chunks), kThreads, 0, st>>>(
        static_cast<const GradNormEntry*>(dev_entries), static_cast<const NormChunk*>(dev_chunks), partials);
  SqrtSumK<<<1, 1024, 0, st>>>(partials, num_chunks, out);
  return Err();
}

int RowReduce(RowReduceKind kind, Dt xdt, Dt odt, int64_t rows, int64_t cols, const void* x, void* out, Stream s) {
  if (rows <= 0) return 0;
  const int64_t blocks = rows < 65536 ? rows : 65536;
  RowReduceK<<<static_cast<unsigned>(blocks), kRowThreads, 0, static_cast<cudaStream_t>(s)>>>(kind, xdt, odt, rows,
                                                                                              cols, x, out);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
