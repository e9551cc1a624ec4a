// Hopper's asynchronous data movement and warp-specialisation primitives, as
// the warp-specialised flash kernels (flash_ws_fwd_kernel.cuh,
// flash_ws_bwd_kernel.cuh) use them:
//   - mbarriers in shared memory (init, arrive, arrive with expected bytes,
//     wait on a phase's parity);
//   - tensor copies (TMA, cp.async.bulk.tensor) of a 64-element-wide box of
//     a 4-d tensor [B, H, T, D] into a 128-byte-swizzled shared tile, the
//     layout wgmma.cuh's descriptors read, or of a run of a 1-d f32 array,
//     completing on an mbarrier;
//   - tensor reductions (cp.reduce.async.bulk.tensor .add) of a swizzled
//     f32 box in shared memory into a 4-d f32 tensor, in bulk groups whose
//     reads of shared memory a thread waits for;
//   - named barriers (bar.sync / bar.arrive) between warpgroups;
//   - register reallocation between warpgroups (setmaxnreg).
// Only sm_90a code may include it (the flash_wgmma_cu target), or a host
// compile with LOOM_ATTN_EMULATE, where warp_emulator.h carries each one out:
// a tensor copy lands when its mbarrier's phase completes, so a kernel that
// reads a tile before waiting for it reads poison.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/flash_common.cuh"

#ifndef LOOM_ATTN_EMULATE
#include <cuda.h>
#endif

namespace loom::kernels::cuda::attention::tma {

#ifdef LOOM_ATTN_EMULATE
using TmaMap = emu::TmaMap;
#define LOOM_GRID_CONSTANT
inline void MbarInit(uint32_t bar, int count) { emu::MbarInit(bar, count); }
inline void FenceMbarInit() {}
inline void ArriveExpectTx(uint32_t bar, uint32_t bytes) { emu::MbarArriveExpectTx(bar, bytes); }
inline void Arrive(uint32_t bar) { emu::MbarArrive(bar); }
inline void Wait(uint32_t bar, int parity) { emu::MbarWait(bar, parity); }
inline void Load(uint32_t dst, const TmaMap& map, int c0, int c1, int c2, int c3, uint32_t bar) {
  emu::TmaLoad(dst, map, c0, c1, c2, c3, bar);
}
inline void Load1(uint32_t dst, const TmaMap& map, int c0, uint32_t bar) { emu::TmaLoad(dst, map, c0, 0, 0, 0, bar); }
inline void ReduceAdd(const TmaMap& map, uint32_t src, int c0, int c1, int c2, int c3) {
  emu::TmaReduceAdd(map, src, c0, c1, c2, c3);
}
inline void BulkCommit() { emu::BulkCommit(); }
template <int N>
inline void BulkWaitRead() {
  emu::BulkWaitRead(N);
}
inline void NamedSync(int id, int n) { emu::NamedSync(id, n); }
inline void NamedArrive(int id, int n) { emu::NamedArrive(id, n); }
template <int N>
inline void RegDealloc() {}
template <int N>
inline void RegAlloc() {}
#else
// A tensor map made on the host (flash_ws.cu: EncodeTmaMap) and passed by
// value in a __grid_constant__ kernel parameter, whose address TMA reads.
struct TmaMap {
  CUtensorMap map;
};
#define LOOM_GRID_CONSTANT __grid_constant__
__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA's
// complete_tx) and the other threads; a __syncthreads follows it.
__device__ __forceinline__ void FenceMbarInit() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void ArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void Arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase of this parity has completed (a fresh barrier is in
// phase 0: waiting on parity 1 returns at once).
__device__ __forceinline__ void Wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "LOOM_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@p bra LOOM_MBAR_DONE;\n"
      "bra LOOM_MBAR_WAIT;\n"
      "LOOM_MBAR_DONE:\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// The box at coordinates (c0 innermost .. c3) into shared memory at dst; its
// bytes complete on `bar`.
__device__ __forceinline__ void Load(uint32_t dst, const TmaMap& map, int c0, int c1, int c2, int c3, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map.map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// The box at c0 of a 1-d tensor map (unswizzled) into shared memory at dst.
__device__ __forceinline__ void Load1(uint32_t dst, const TmaMap& map, int c0, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(&map.map)), "r"(bar), "r"(c0)
      : "memory");
}
// Adds the box in shared memory at src (the map's layout: 128-byte rows,
// swizzled) into the tensor at coordinates (c0 innermost .. c3); elements
// outside the tensor are skipped. The issuing thread's open bulk group.
__device__ __forceinline__ void ReduceAdd(const TmaMap& map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(&map.map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void BulkCommit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Returns once every bulk group of this thread but the newest N has read its
// shared-memory source (which may then be written again).
template <int N>
__device__ __forceinline__ void BulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void NamedSync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n)); }
__device__ __forceinline__ void NamedArrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n)); }
// Gives this warpgroup's registers back down to N per thread / takes them up
// to N (every warp of the warpgroup executes it).
template <int N>
__device__ __forceinline__ void RegDealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void RegAlloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif

}  // namespace loom::kernels::cuda::attention::tma
