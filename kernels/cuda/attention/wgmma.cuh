// Warpgroup matrix products (sm_90a `wgmma.mma_async`) and the shared-memory
// layout they read: the pieces the wgmma flash kernels are built from. Only a
// file compiled for sm_90a may include this (flash_wgmma.cu and
// flash_wgmma_bwd.cu; their BUILD target passes -gencode
// arch=compute_90a,code=sm_90a), or a host compile with LOOM_ATTN_EMULATE
// (attention_emulation_test), where warp_emulator.h carries out the products
// at the waits that retire them (the fences do nothing).
//
// Shapes: m64 nN k16, N = 64 or 128, f32 accumulators, bf16 or f16 inputs.
// One warpgroup (4 consecutive warps, 128 threads) issues each product; warp w
// of the group owns rows 16w..16w+15 of the 64, and a thread's accumulators
// follow mma.sync's m16n8 C layout repeated over N/8 column groups:
//   d[4i + 0..1] = (row g, cols 8i + 2t, +1), d[4i + 2..3] = (row g + 8, same)
// (g = lane / 4, t = lane % 4). An A operand held in registers has mma.sync's
// m16n8k16 A layout for the warp's 16 rows.
//
// Shared-memory operands use the 128-byte swizzle ("SW128"): a tile of R rows
// by W elements (W a multiple of 64, bf16/f16) is stored as W/64 column
// panels, each R rows of 64 elements (128 bytes), and within each group of 8
// rows the 16-byte chunk c of row r sits at chunk c ^ (r % 8) (SwTile below).
// Panels start on 1024-byte boundaries. Descriptors:
//   K-major operand (the reduction dimension is the tile's row, contiguous):
//     start = the panel holding the k columns + 2 bytes x (k % 64),
//     stride byte offset = 1024 (8 rows), leading byte offset unused.
//   MN-major operand with the transpose bit (rows = the reduction dimension,
//     e.g. V as [key][d] for O += P V):
//     start = row k's 8-row group, leading byte offset = panel size (the next
//     64 columns of N), stride byte offset = 1024 (the next 8 rows of K).
// wgmma_check.cu runs every form used here against a host product.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/flash_common.cuh"

namespace loom::kernels::cuda::attention::wg {

// Element offset of (r, c) in an SW128 tile of R rows (any width).
template <int R>
__device__ __forceinline__ int SwTile(int r, int c) {
  return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

template <int R>
struct Sw128Layout {
  static __device__ __forceinline__ int Offset(int r, int c) { return SwTile<R>(r, c); }
};
// Rows [row0, row0 + ROWS) of a [rows_valid, W] matrix (rows `ld` elements
// apart, 16-byte aligned) into an SW128 tile by NT threads with cp.async;
// rows past rows_valid become zeros.
template <int W, int ROWS, int NT, typename T>
__device__ __forceinline__ void LoadSw(T* smem, const T* g, int64_t ld, int row0, int rows_valid, int tid) {
  LoadTile<W, ROWS, NT, Sw128Layout<ROWS>>(smem, g, ld, row0, rows_valid, tid);
}

// An accumulator of N columns (this thread's part of an m64nN product) as
// A-operand fragments for a following product with K = N: fragment kk holds
// columns 16kk..16kk+15 in mma.sync's m16n8k16 A layout, rounded to the
// input type.
template <int N, bool kBf16>
__device__ __forceinline__ void PackA(const float* acc, uint32_t (*a)[4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    a[kk][0] = Elem<kBf16>::Pack(acc[8 * kk + 0], acc[8 * kk + 1]);
    a[kk][1] = Elem<kBf16>::Pack(acc[8 * kk + 2], acc[8 * kk + 3]);
    a[kk][2] = Elem<kBf16>::Pack(acc[8 * kk + 4], acc[8 * kk + 5]);
    a[kk][3] = Elem<kBf16>::Pack(acc[8 * kk + 6], acc[8 * kk + 7]);
  }
}

// A shared-memory matrix descriptor: byte address, leading and stride byte
// offsets (multiples of 16), 128-byte swizzle.
__device__ __forceinline__ uint64_t Desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

#ifdef LOOM_ATTN_EMULATE
inline void Fence() {}
inline void Commit() { emu::WgmmaCommit(); }
template <int N>
inline void Wait() {
  emu::WgmmaWait(N);
}
template <int N>
inline void FenceRegs(float*) {}
inline void FenceProxyAsync() {}

template <int N, bool kBf16>
struct Mma {
  static void SS(float* d, uint64_t a, uint64_t b, int accumulate) {
    emu::Wgmma(d, N, a, nullptr, b, /*trans_b=*/false, accumulate != 0, kBf16);
  }
  static void SSt(float* d, uint64_t a, uint64_t b, int accumulate) {
    emu::Wgmma(d, N, a, nullptr, b, /*trans_b=*/true, accumulate != 0, kBf16);
  }
  template <int kTransB>
  static void RS(float* d, const uint32_t* a, uint64_t b, int accumulate) {
    emu::Wgmma(d, N, 0, a, b, kTransB != 0, accumulate != 0, kBf16);
  }
};
#else
__device__ __forceinline__ void Fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void Commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of these accumulators across
// the surrounding wgmma issue/wait statements (the products write them
// asynchronously, which the compiler cannot see).
template <int N>
__device__ __forceinline__ void FenceRegs(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async)
// visible to the async proxy that wgmma reads through; then a barrier.
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Operand lists: 32 or 64 accumulators, then the inputs.
#define LOOM_WG_R32                                                                                                 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define LOOM_WG_R64                                                                                                   \
  LOOM_WG_R32                                                                                                         \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, " \
  "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LOOM_WG_O8(i)                                                                                       \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define LOOM_WG_O32 LOOM_WG_O8(0), LOOM_WG_O8(8), LOOM_WG_O8(16), LOOM_WG_O8(24)
#define LOOM_WG_O64 LOOM_WG_O32, LOOM_WG_O8(32), LOOM_WG_O8(40), LOOM_WG_O8(48), LOOM_WG_O8(56)

// Mma<N, kBf16>::SS: d (+)= A(smem) B(smem), both K-major; SSt: B MN-major
// (the transpose bit).
// Mma<N, kBf16>::RS<kTransB>: d (+)= A(registers) B(smem); kTransB = 1 for an
// MN-major B. `accumulate` = 0 overwrites d.
template <int N, bool kBf16>
struct Mma;

#define LOOM_WG_DEFINE(N, BF, TY, RLIST, OLIST, IA, IB, IACC, IRA, IRB, IRACC, IRT)                              \
  template <>                                                                                                    \
  struct Mma<N, BF> {                                                                                            \
    static __device__ __forceinline__ void SS(float* d, uint64_t a, uint64_t b, int accumulate) {                \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " IACC ", 0;\n"                                             \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" RLIST "}, " IA ", " IB       \
                   ", p, 1, 1, 0, 0;\n}\n"                                                                       \
                   : OLIST                                                                                       \
                   : "l"(a), "l"(b), "r"(accumulate));                                                           \
    }                                                                                                            \
    static __device__ __forceinline__ void SSt(float* d, uint64_t a, uint64_t b, int accumulate) {               \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " IACC ", 0;\n"                                             \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" RLIST "}, " IA ", " IB       \
                   ", p, 1, 1, 0, 1;\n}\n"                                                                       \
                   : OLIST                                                                                       \
                   : "l"(a), "l"(b), "r"(accumulate));                                                           \
    }                                                                                                            \
    template <int kTransB>                                                                                       \
    static __device__ __forceinline__ void RS(float* d, const uint32_t* a, uint64_t b, int accumulate) {         \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " IRACC ", 0;\n"                                            \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" RLIST "}, {" IRA "}, " IRB \
                   ", p, 1, 1, " IRT ";\n}\n"                                                                    \
                   : OLIST                                                                                       \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));     \
    }                                                                                                            \
  };

LOOM_WG_DEFINE(64, true, "bf16", LOOM_WG_R32, LOOM_WG_O32, "%32", "%33", "%34", "%32, %33, %34, %35", "%36", "%37",
               "%38")
LOOM_WG_DEFINE(64, false, "f16", LOOM_WG_R32, LOOM_WG_O32, "%32", "%33", "%34", "%32, %33, %34, %35", "%36", "%37",
               "%38")
LOOM_WG_DEFINE(128, true, "bf16", LOOM_WG_R64, LOOM_WG_O64, "%64", "%65", "%66", "%64, %65, %66, %67", "%68", "%69",
               "%70")
LOOM_WG_DEFINE(128, false, "f16", LOOM_WG_R64, LOOM_WG_O64, "%64", "%65", "%66", "%64, %65, %66, %67", "%68",
               "%69", "%70")

#undef LOOM_WG_DEFINE
#undef LOOM_WG_O64
#undef LOOM_WG_O32
#undef LOOM_WG_O8
#undef LOOM_WG_R64
#undef LOOM_WG_R32
#endif  // LOOM_ATTN_EMULATE

}  // namespace loom::kernels::cuda::attention::wg
