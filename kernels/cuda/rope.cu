// Interleaved rotary embedding (rope.h): the angles' table once, then the
// rotation reading it. When D % 8 == 0 and every pointer is 16-byte aligned
// (the executor's buffers are), each thread rotates one 16-byte vector of x
// (8 bf16 or 4 f32: 4 or 2 pairs) with 16-byte loads of x and of the table,
// and 32-bit index math when the vectors number under 2^31; otherwise one
// thread per pair. Both compute each output with the same expression
// (Rotate), so they agree bitwise.
#include "kernels/cuda/rope.h"

#include "kernels/cuda/device_util.cuh"

namespace loom::kernels::cuda::kern {
namespace {

__global__ void RopeTableK(int64_t T, int64_t D, double theta, int64_t offset, float* table) {
  const int64_t half = D / 2, n = T * half;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = p / half, i = p - t * half;
    const double a = static_cast<double>(offset + t) * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    table[2 * p] = static_cast<float>(cos(a));
    table[2 * p + 1] = static_cast<float>(sin(a));
  }
}

// The rotation of the pair (x0, x1) by the angle with cosine c and sine sn,
// with its roundings spelled out (one product rounded, then one fused
// multiply-add) so that no caller's contraction choice can change a bit.
__device__ __forceinline__ void Rotate(float x0, float x1, float c, float sn, float& y0, float& y1) {
  y0 = __fmaf_rn(x0, c, -__fmul_rn(x1, sn));
  y1 = __fmaf_rn(x0, sn, __fmul_rn(x1, c));
}

__global__ void RopeK(int dt, int64_t T, int64_t H, int64_t D, bool inverse, const float* table, const void* x,
                      void* y, int64_t pairs) {
  const int64_t half = D / 2;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    const int64_t t = (p / (half * H)) % T;
    const float2 cs = reinterpret_cast<const float2*>(table)[t * half + i];
    float y0, y1;
    Rotate(Ld(x, dt, 2 * p), Ld(x, dt, 2 * p + 1), cs.x, inverse ? -cs.y : cs.y, y0, y1);
    St(y, dt, 2 * p, y0);
    St(y, dt, 2 * p + 1, y1);
  }
}

// 16 bytes of x as floats, and back (bf16 rounded to nearest even).
__device__ __forceinline__ void Load16(const bf16* p, float (&v)[8]) { Unpack8(*reinterpret_cast<const uint4*>(p), v); }
__device__ __forceinline__ void Store16(bf16* p, const float (&v)[8]) { *reinterpret_cast<uint4*>(p) = Pack8(v); }
__device__ __forceinline__ void Load16(const float* p, float (&v)[4]) {
  const float4 u = *reinterpret_cast<const float4*>(p);
  v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
}
__device__ __forceinline__ void Store16(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

// One thread per 16-byte vector of N elements: N / 2 pairs, whose N / 2
// table entries {cos, sin} are N consecutive floats. vpr vectors make a row
// of D; rows are (b, t, h) in order, so t = (row / H) % T. Index is
// uint32_t or uint64_t.
template <typename E, int N, typename Index>
__global__ void RopeVecK(Index vectors, Index vpr, Index H, Index T, bool inverse, const float* table, const E* x,
                         E* y) {
  const Index half = vpr * (N / 2);
  for (Index v = blockIdx.x * Index(blockDim.x) + threadIdx.x; v < vectors; v += Index(gridDim.x) * blockDim.x) {
    const Index row = v / vpr, j = v - row * vpr;
    const Index t = (row / H) % T;
    float xv[N], cs[N], out[N];
    Load16(x + static_cast<uint64_t>(v) * N, xv);
    const float* tp = table + 2 * (static_cast<uint64_t>(t) * half + static_cast<uint64_t>(j) * (N / 2));
#pragma unroll
    for (int q = 0; q < N; q += 4) {
      const float4 u = *reinterpret_cast<const float4*>(tp + q);
      cs[q] = u.x, cs[q + 1] = u.y, cs[q + 2] = u.z, cs[q + 3] = u.w;
    }
#pragma unroll
    for (int k = 0; k < N / 2; ++k) {
      Rotate(xv[2 * k], xv[2 * k + 1], cs[2 * k], inverse ? -cs[2 * k + 1] : cs[2 * k + 1], out[2 * k],
             out[2 * k + 1]);
    }
    Store16(y + static_cast<uint64_t>(v) * N, out);
  }
}

template <typename E, int N>
void LaunchRopeVec(int64_t B, int64_t T, int64_t H, int64_t D, bool inverse, const float* table, const void* x,
                   void* y, cudaStream_t s) {
  const int64_t vpr = D / N, vectors = B * T * H * vpr;
  const E* xe = static_cast<const E*>(x);
  E* ye = static_cast<E*>(y);
  if (vectors < (int64_t{1} << 31)) {  // v plus the grid's stride (under 2^24) stays below 2^32
    RopeVecK<E, N, uint32_t><<<Blocks(vectors), kThreads, 0, s>>>(
        static_cast<uint32_t>(vectors), static_cast<uint32_t>(vpr), static_cast<uint32_t>(H),
        static_cast<uint32_t>(T), inverse, table, xe, ye);
  } else {
    RopeVecK<E, N, uint64_t><<<Blocks(vectors), kThreads, 0, s>>>(
        static_cast<uint64_t>(vectors), static_cast<uint64_t>(vpr), static_cast<uint64_t>(H),
        static_cast<uint64_t>(T), inverse, table, xe, ye);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int64_t RopeTableFloats(int64_t T, int64_t D) { return T * (D / 2) * 2; }

int RopeTable(int64_t T, int64_t D, double theta, int64_t offset, float* table, Stream s) {
  const int64_t n = T * (D / 2);
  if (n <= 0) return 0;
  RopeTableK<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(s)>>>(T, D, theta, offset, table);
  return Err();
}

int Rope(Dt dt, int64_t B, int64_t T, int64_t H, int64_t D, bool inverse, const float* table, const void* x, void* y,
         Stream s) {
  const int64_t pairs = B * T * H * (D / 2);
  if (pairs <= 0) return 0;
  cudaStream_t st = static_cast<cudaStream_t>(s);
  if (D % 8 == 0 && Aligned16(x) && Aligned16(y) && Aligned16(table)) {
    if (dt == kBF16) {
      LaunchRopeVec<bf16, 8>(B, T, H, D, inverse, table, x, y, st);
    } else {
      LaunchRopeVec<float, 4>(B, T, H, D, inverse, table, x, y, st);
    }
    return Err();
  }
  RopeK<<<Blocks(pairs), kThreads, 0, st>>>(dt, T, H, D, inverse, table, x, y, pairs);
  return Err();
}

}  // namespace loom::kernels::cuda::kern
