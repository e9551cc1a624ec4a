// Device helpers shared by flash_fwd.cu and flash_bwd.cu (sm_80+ instructions
// that sm_90 runs): mma.sync m16n8k16 (bf16/f16 in, f32 accumulate), ldmatrix
// (plain and transposed), cp.async 16-byte copies with zero fill, and the XOR
// swizzle of shared-memory tiles.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16x16): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B (16x8):  b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C (16x8):  c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
// Tiles in shared memory are row-major with rows of `W` elements; the 16-byte
// chunk c of row r sits at chunk c ^ (r % 8) (or r % (W/8) for narrow rows), so
// that the 8 rows an ldmatrix reads fall in distinct banks.
//
// With LOOM_ATTN_EMULATE (host compilers only, attention_emulation_test) each
// primitive is carried out by warp_emulator.h instead of PTX, so the kernels'
// index arithmetic runs, unchanged, on the CPU.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef LOOM_ATTN_EMULATE
#include "kernels/cuda/attention/warp_emulator.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace loom::kernels::cuda::attention {

constexpr float kLog2e = 1.4426950408889634f;

template <bool kBf16>
struct Elem;
template <>
struct Elem<true> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float ToF(T v) { return __bfloat162float(v); }
  static __device__ __forceinline__ T FromF(float v) { return __float2bfloat16_rn(v); }
  static __device__ __forceinline__ void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#ifdef LOOM_ATTN_EMULATE
    emu::Mma(c, a, b0, b1, /*bf16=*/true);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};
template <>
struct Elem<false> {
  using T = __half;
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float ToF(T v) { return __half2float(v); }
  static __device__ __forceinline__ T FromF(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#ifdef LOOM_ATTN_EMULATE
    emu::Mma(c, a, b0, b1, /*bf16=*/false);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};

#ifdef LOOM_ATTN_EMULATE
inline uint32_t SmemAddr(const void* p) { return emu::SmemAddr(p); }
inline void Ldsm4(uint32_t* r, uint32_t addr) { emu::Ldsm4(r, addr, false); }
inline void Ldsm4T(uint32_t* r, uint32_t addr) { emu::Ldsm4(r, addr, true); }
inline void CpAsync16(uint32_t dst, const void* src, bool valid) { emu::CpAsync16(dst, src, valid); }
inline void CpAsync4(uint32_t dst, const void* src) { emu::CpAsync4(dst, src); }
inline void CpAsyncCommit() { emu::CpAsyncCommit(); }
template <int N>
inline void CpAsyncWait() {
  emu::CpAsyncWait(N);
}
inline float Exp2(float x) { return exp2f(x); }
inline void RedAddV4(float* p, float a, float b, float c, float d) { emu::RedAddV4(p, a, b, c, d); }
inline void Copy16(void* dst, const void* src) { std::memcpy(dst, src, 16); }
#else
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void Ldsm4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void Ldsm4T(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// 16 bytes global -> shared; when !valid the destination is zero-filled and
// nothing is read.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
// 4 bytes global -> shared (cp.async.ca: the only form for 4 bytes).
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// p[0..3] += (a, b, c, d) in global memory: one 16-byte vector reduction
// (sm_90; p 16-byte aligned). Each element's add is atomic.
__device__ __forceinline__ void RedAddV4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
// 16 bytes from src to dst (both 16-byte aligned; any state spaces).
__device__ __forceinline__ void Copy16(void* dst, const void* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

#endif

// Element offset of (row, col) in a swizzled tile with rows of W elements.
template <int W>
__device__ __forceinline__ int Swz(int row, int col) {
  constexpr int kChunks = W / 8;
  constexpr int kMask = kChunks >= 8 ? 7 : kChunks - 1;
  return row * W + ((((col >> 3) ^ (row & kMask))) << 3) + (col & 7);
}

// The shared-memory layout LoadTile writes: Swz<W>.
template <int W>
struct RowSwizzle {
  static __device__ __forceinline__ int Offset(int row, int col) { return Swz<W>(row, col); }
};

// Copies rows [row0, row0 + ROWS) of a [rows_valid, W] global matrix (rows
// `ld` elements apart, 16-byte aligned) into a shared tile laid out by
// Layout::Offset(row, col) (default: the swizzle above) with cp.async; rows
// past rows_valid become zeros.
template <int W, int ROWS, int NT, class Layout = RowSwizzle<W>, typename T>
__device__ __forceinline__ void LoadTile(T* smem, const T* g, int64_t ld, int row0, int rows_valid, int tid) {
  constexpr int kChunks = W / 8;
  static_assert((ROWS * kChunks) % NT == 0, "tile chunks must divide among the threads");
  static_assert(NT % kChunks == 0, "a thread keeps its 16-byte column across its rows");
  constexpr int kRowStep = NT / kChunks;
  const uint32_t base = SmemAddr(smem);
  // This thread's chunks: rows r0, r0 + kRowStep, ... of column chunk cc (one
  // pointer bump per row, no multiply per chunk).
  const int r0 = tid / kChunks, cc = tid % kChunks;
  const T* src = g + static_cast<int64_t>(row0 + r0) * ld + cc * 8;
  const int64_t step = kRowStep * ld;
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / NT; ++i) {
    const int r = r0 + i * kRowStep;
    const bool ok = row0 + r < rows_valid;
    CpAsync16(base + 2 * Layout::Offset(r, cc * 8), ok ? src : g, ok);
    src += step;
  }
}

}  // namespace loom::kernels::cuda::attention
