// The compiled configurations of the flash-attention kernels, as X-macro lists
// that the launchers (flash_fwd.cu, flash_bwd.cu), the emulation test and the
// host side (names for FlashAttnArgs' variant fields, the SDPA dispatcher's
// candidates) all expand. Plain C++: no CUDA header needed.
//
//   forward  X(id, warps, key tile BN, blocks per SM, row groups per warp MW)
//            query tile BM = 16 MW warps
//   dK/dV    X(id, warps, query tile BM, blocks per SM) key tile BN = 16 warps
//   dQ       X(id, warps, key tile BN, blocks per SM)   query tile BM = 16 warps
// plus the single-pass backward with f32 atomic dQ (kBwdAtomicVariant; NW 4,
// BM 32 at D 128, 64 at D 64), which is faster to launch but contended and not
// deterministic. Ids are 1-based; 0 means "the default for D" below.
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

namespace loom::cuda::attn {

constexpr int kFwdVariants = 7;
constexpr int kBwdVariants = 6;       // the five dK/dV configurations and:
constexpr int kBwdAtomicVariant = 6;  // single pass, f32 atomic dQ
constexpr int kDqVariants = 4;

// Defaults: the fastest at the issue-8 shapes in the H200 sweep of 2026-12-02
// (sdpa_bench --sweep; docs/perf.md). The SDPA dispatcher times them all.
inline int FwdDefaultVariant(int d) { return d == 64 ? 4 : 4; }
inline int BwdDefaultVariant(int d) { return d == 128 ? 2 : 2; }
inline int DqDefaultVariant(int d) { return d == 128 ? 2 : 1; }

}  // namespace loom::cuda::attn
