// The compiled configurations of the flash-attention kernels, as X-macro lists
// that the launchers (flash_fwd.cu, flash_bwd.cu), the emulation test and the
// host side (names for FlashAttnArgs' variant fields, the SDPA dispatcher's
// candidates) all expand. Plain C++: no CUDA header needed.
//
//   forward  X(id, warps, key tile BN, blocks per SM, row groups per warp MW)
//            query tile BM = 16 MW warps
//   dK/dV    X(id, warps, query tile BM, blocks per SM) key tile BN = 16 warps
//   dQ       X(id, warps, key tile BN, blocks per SM)   query tile BM = 16 warps
// plus the single-pass backward with f32 atomic dQ (kBwdAtomicVariant, the
// configuration LOOM_BWD_ATOMIC_CFG: warps, query tile BM; key tile 16 warps),
// which does 5 matrix products to the two-pass scheme's 7 but adds dQ with
// atomics, so its last bits vary run to run; and the stored-dS backward
// (kBwdDsVariant): the dK/dV pass also writes dS to the workspace (B H Tq Tk
// elements) and dQ = dS K is one product over it: 5 products, deterministic,
// at the cost of that workspace. Ids are 1-based; 0 means "the default for D"
// below.
#pragma once

#define LOOM_FWD_VARIANTS(X) \
  X(1, 8, 64, 1, 1)          \
  X(2, 4, 64, 2, 1)          \
  X(3, 8, 128, 1, 1)         \
  X(4, 4, 64, 2, 2)          \
  X(5, 8, 32, 1, 2)          \
  X(6, 8, 64, 1, 2)          \
  X(7, 4, 32, 2, 2)

#define LOOM_BWD_VARIANTS(X) \
  X(1, 4, 32, 1)             \
  X(2, 4, 64, 1)             \
  X(3, 8, 32, 1)             \
  X(4, 8, 64, 1)             \
  X(5, 4, 32, 2)

#define LOOM_DQ_VARIANTS(X) \
  X(1, 4, 64, 1)            \
  X(2, 8, 64, 1)            \
  X(3, 8, 32, 1)            \
  X(4, 4, 64, 2)

#define LOOM_BWD_ATOMIC_NW 8
#define LOOM_BWD_ATOMIC_BM 64

namespace loom::kernels::cuda::attention {

// Forward: the LOOM_FWD_VARIANTS (mma.sync) and the wgmma kernel
// (flash_wgmma.cu; BN 128; compute capability 9.0 only, elsewhere
// FlashForward runs the mma.sync default instead), in two schedules: each
// tile in turn, or pipelined (the next tile's S with this tile's P V); two
// warpgroups per block (BM 128) or, pipelined, one (BM 64).
constexpr int kFwdVariants = 14;
constexpr int kFwdWgmmaVariant = 8;
constexpr int kFwdWgmmaPipeVariant = 9;
constexpr int kFwdWgmmaPipe1Variant = 10;
// The warp-specialised kernel (flash_ws.cu; compute capability 9.0): a
// producer warpgroup loading K and V tiles by TMA for two consumer
// warpgroups (BM 128), three (BM 192), or one (BM 64, two blocks per SM),
// each with a ring of two K/V stages; kFwdWsSt3Variant has three stages
// (two consumers at D 128, one at D 64). At D 128 the one- and
// three-consumer variants run with two consumers: three warpgroups'
// registers would not hold the tile, and two blocks' K/V rings would not
// fit in shared memory. Where TMA cannot address an operand the pipelined
// wgmma kernel runs instead.
constexpr int kFwdWsVariant = 11;
constexpr int kFwdWs3Variant = 12;
constexpr int kFwdWs1Variant = 13;
constexpr int kFwdWsSt3Variant = 14;
constexpr bool IsWsFwdVariant(int v) { return v >= kFwdWsVariant && v <= kFwdWsSt3Variant; }
// Consumer warpgroups and K/V stages of a warp-specialised variant at head dim d.
constexpr int WsWarpgroups(int v, int d) {
  return d == 128 ? 2 : v == kFwdWs3Variant ? 3 : v == kFwdWs1Variant || v == kFwdWsSt3Variant ? 1 : 2;
}
constexpr int WsStages(int v) { return v == kFwdWsSt3Variant ? 3 : 2; }
constexpr bool IsWgmmaFwdVariant(int v) { return v >= kFwdWgmmaVariant && v <= kFwdWsSt3Variant; }
constexpr int kBwdVariants = 12;      // the five dK/dV configurations and:
constexpr int kBwdAtomicVariant = 6;  // single pass, f32 atomic dQ
constexpr int kBwdDsVariant = 7;      // dS stored to the workspace, dQ from it
// The same with the dK/dV pass on wgmma (flash_wgmma_bwd.cu; compute
// capability 9.0, elsewhere kBwdDsVariant's pass runs): same workspace;
// two warpgroups (128 keys) per block, or one (64 keys).
constexpr int kBwdWgmmaDsVariant = 8;
constexpr int kBwdWgmmaDs1Variant = 9;
// The same with the warp-specialised dK/dV pass (flash_ws.cu; compute
// capability 9.0): a producer warpgroup loading by TMA for two consumer
// warpgroups (128 keys a block), or one (64 keys, two blocks per SM). Where
// TMA cannot address an operand the wgmma pass runs instead.
constexpr int kBwdWsDsVariant = 10;
constexpr int kBwdWsDs1Variant = 11;
constexpr bool IsWsBwdVariant(int v) { return v == kBwdWsDsVariant || v == kBwdWsDs1Variant; }
constexpr bool IsDsVariant(int v) { return v >= kBwdDsVariant && v <= kBwdWsDs1Variant; }
// The warp-specialised one-pass backward (flash_ws.cu; compute capability
// 9.0): dQ summed in the f32 accumulator by tensor reduces from shared
// memory, 5 products and no dS workspace, last bits of dQ varying run to
// run (as kBwdAtomicVariant's, which runs instead off compute capability
// 9.0 or where TMA cannot address an operand).
constexpr int kBwdWsAtomicVariant = 12;
constexpr bool IsAtomicDqVariant(int v) { return v == kBwdAtomicVariant || v == kBwdWsAtomicVariant; }

// The stored-dS variant's workspace: dS^T of every (batch, head) padded to
// DsKeys(seq_k) x DsQueries(seq_q) (the first pass's 64-key tiles, the dQ
// pass's 128-row query tiles), 2 bytes an element.
inline int64_t DsKeys(int64_t seq_k) { return (seq_k + 63) / 64 * 64; }
inline int64_t DsQueries(int64_t seq_q) { return (seq_q + 127) / 128 * 128; }
constexpr int kDqVariants = 4;

// Defaults: the fastest at the issue-8 shapes in the H200 sweep of 2026-12-02
// (sdpa_bench --sweep; docs/perf.md). The SDPA dispatcher times them all.
// Forward: the warp-specialised kernel, two consumer warpgroups at D 128
// (631-687 TFLOP/s against the pipelined wgmma kernel's 388-444, H200 sweep
// of 2026-12-07), one with two blocks per SM at D 64 (0.070 ms against 0.099
// at B8 H12 T1024 non-causal). Off compute capability 9.0 a wgmma default
// runs FwdMmaDefaultVariant. (The backward's default is the stored-dS scheme with
// the warp-specialised one-warpgroup dK/dV pass while dS fits, 3.40 ms against
// the wgmma pass's 3.62 at B4 H16 T4096 D128 on the H100 of 2026-12-07:
// FlashResolvedBackwardVariant.)
inline int FwdMmaDefaultVariant(int d) { return d == 64 ? 4 : 4; }
inline int FwdDefaultVariant(int d) { return d == 128 ? kFwdWsVariant : kFwdWs1Variant; }
inline int BwdDefaultVariant(int d) { return d == 128 ? 2 : 2; }
inline int DqDefaultVariant(int d) { return d == 128 ? 2 : 1; }

}  // namespace loom::kernels::cuda::attention
