// A CPU emulation of the few CUDA features the flash-attention kernels use,
// for attention_emulation_test (host compiler, LOOM_ATTN_EMULATE): each thread
// of a block is a ucontext fiber on one OS thread, __syncthreads and the warp
// collectives (ldmatrix, mma.sync m16n8k16, __shfl_xor_sync) are barriers at
// which every lane deposits its operands and then computes its own result with
// the documented fragment layouts. Shared memory is one static array. Slow
// (microseconds per collective) but exact in indexing: it checks the kernels'
// fragment and tile arithmetic without a GPU.
// Hopper's warpgroup products (wgmma.cuh) are warpgroup collectives the same
// way: the 128 threads deposit their descriptors (and A registers) and each
// computes its own accumulators, reading shared memory through the
// descriptors' 128-byte swizzle.
// Both asynchronous kinds of work take effect at the latest moment the
// hardware allows: a cp.async copy lands when its thread's cp.async.wait_group
// retires its group, and a warpgroup product is computed when wgmma's
// wait_group retires its group, reading shared memory and its accumulators
// then (its A registers are taken at issue). A kernel that reads a tile or an
// accumulator before waiting for it, or writes over a product's operands
// before the product's wait (a store, or a copy whose own wait comes first),
// computes from poison or stale values and fails its check.
#pragma once

#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct __nv_bfloat16 {
  uint16_t x;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
struct __half {
  uint16_t x;
};
struct __half2 {
  __half x, y;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
inline float __bfloat162float(__nv_bfloat16 v) {
  uint32_t u = static_cast<uint32_t>(v.x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return {0x7FC0};
  u += 0x7FFF + ((u >> 16) & 1);
  return {static_cast<uint16_t>(u >> 16)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline float __half2float(__half v) {
  _Float16 h;
  std::memcpy(&h, &v.x, 2);
  return static_cast<float>(h);
}
inline __half __float2half_rn(float f) {
  _Float16 h = static_cast<_Float16>(f);
  __half r;
  std::memcpy(&r.x, &h, 2);
  return r;
}
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline float __log2f(float x) { return std::log2(x); }

namespace loom::kernels::cuda::attention {

struct EmuDim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline EmuDim3 threadIdx, blockIdx, gridDim, blockDim;
// 1024-byte aligned, as the 128-byte swizzle's 8-row pattern requires.
alignas(1024) inline unsigned char smem_raw[1 << 18];
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace emu {

// The order fibers run in. Lockstep: every thread a turn in each pass, so
// warpgroups advance side by side. Skewed: each warpgroup (128 threads) in
// turn runs as far as it can before the next gets a turn, lowest first
// (up) or highest first (down), so one warpgroup runs ahead of another: a
// product that reads another warpgroup's tile before a barrier says it is
// written, or a buffer refilled while another warpgroup still reads it,
// then computes from the wrong data.
// Skewed up, with parking: the highest warpgroup's threads also end their
// turn at every barrier they arrive at without waiting (mbarrier.arrive,
// bar.arrive), so the waiting threads run before it goes on and work it
// does after an arrival (a product's wait, say) comes after theirs, while
// the lower warpgroups run ahead as far as they can.
enum class Schedule { kLockstep, kSkewUp, kSkewDown, kSkewUpPark };

struct State {
  jmp_buf sched;                  // the scheduler, while a fiber runs
  struct Jump {
    jmp_buf b;
  };
  std::vector<Jump> fiber;        // each fiber, while it waits
  std::vector<char> started;
  std::vector<ucontext_t> ctx;
  std::vector<std::vector<char>> stacks;
  std::vector<char> done;
  std::vector<char> parked;  // kSkewUpPark: ended its turn at an arrival
  int nthreads = 0, cur = 0;
  int block_arrived = 0;
  long block_gen = 0;
  int warp_arrived[32] = {};
  long warp_gen[32] = {};
  int warp_live[32] = {};
  int wg_arrived[8] = {};
  long wg_gen[8] = {};
  uint32_t slot_u[1024][6];
  uint64_t slot_d[1024][2];
  float slot_f[1024];
  // Per thread: cp.async copies and wgmma products issued but not yet
  // retired, in commit groups (the last one open).
  struct Copy {
    uint32_t dst;
    const void* src;
    int bytes;
    bool valid;
  };
  struct Product {
    float* d;
    int n;
    uint64_t a_desc, b_desc;
    uint32_t a_reg[4];
    bool has_a_reg, trans_b, accumulate, bf16;
    std::vector<uint16_t> seen;  // the shared-memory operands at the issue (WgOperandBits)
  };
  std::vector<std::vector<std::vector<Copy>>> copies;
  std::vector<std::vector<std::vector<Product>>> products;
  // Shared-memory barriers (mbarrier), by address: arrivals still expected in
  // the current phase, bytes of tensor copies still expected, phases
  // completed, the current phase's tensor copies, and those of a completed
  // phase that no thread has waited for yet.
  struct Mbar {
    int count = 0, pending = 0;
    int64_t tx = 0;
    long completed = 0;
    std::vector<std::pair<uint32_t, std::vector<unsigned char>>> landing, unlanded;
  };
  std::vector<std::pair<uint32_t, Mbar>> mbars;
  // Per thread: tensor reductions issued, in bulk groups (the last one open),
  // with the bytes their source held at the issue.
  struct Reduce {
    uint32_t src;
    std::vector<unsigned char> bytes;
  };
  std::vector<std::vector<std::vector<Reduce>>> bulk;
  // Named barriers (bar.sync / bar.arrive ids 0-15): threads arrived, generation.
  int named_arrived[16] = {};
  long named_gen[16] = {};
  // Bumped by every arrival at any barrier and every fiber's end: a pass of
  // the scheduler over the live fibers that leaves it unchanged is a deadlock.
  long progress = 0;
  std::function<void()> body;
  Schedule schedule = Schedule::kLockstep;
};
inline State& S() {
  static State s;
  return s;
}
// Switches with _setjmp/_longjmp (no signal-mask system calls); ucontext only
// starts each fiber on its own stack.
inline void Yield() {
  State& s = S();
  if (!_setjmp(s.fiber[s.cur].b)) _longjmp(s.sched, 1);
}
inline void WarpBarrier() {
  State& s = S();
  const int w = threadIdx.x >> 5;
  const long gen = s.warp_gen[w];
  ++s.progress;
  if (++s.warp_arrived[w] == s.warp_live[w]) {
    s.warp_arrived[w] = 0;
    ++s.warp_gen[w];
    return;
  }
  while (s.warp_gen[w] == gen) Yield();
}
// Barrier over the four warps of this thread's warpgroup (the live ones).
inline int WarpgroupLive(int wg) {
  const State& s = S();
  return s.warp_live[4 * wg] + s.warp_live[4 * wg + 1] + s.warp_live[4 * wg + 2] + s.warp_live[4 * wg + 3];
}
inline void WarpgroupBarrier() {
  State& s = S();
  const int wg = threadIdx.x >> 7;
  const long gen = s.wg_gen[wg];
  ++s.progress;
  if (++s.wg_arrived[wg] == WarpgroupLive(wg)) {
    s.wg_arrived[wg] = 0;
    ++s.wg_gen[wg];
    return;
  }
  while (s.wg_gen[wg] == gen) Yield();
}
inline void BlockBarrier() {
  State& s = S();
  const long gen = s.block_gen;
  ++s.progress;
  if (++s.block_arrived == s.nthreads) {
    s.block_arrived = 0;
    ++s.block_gen;
    return;
  }
  while (s.block_gen == gen) Yield();
}
inline void Trampoline() {
  State& s = S();
  s.body();
  s.done[s.cur] = 1;
  ++s.progress;
  --s.warp_live[threadIdx.x >> 5];
  // A warp barrier may now be complete without this thread.
  const int w = threadIdx.x >> 5;
  if (s.warp_arrived[w] > 0 && s.warp_arrived[w] == s.warp_live[w]) {
    s.warp_arrived[w] = 0;
    ++s.warp_gen[w];
  }
  const int wg = threadIdx.x >> 7;  // and a warpgroup barrier
  if (s.wg_arrived[wg] > 0 && s.wg_arrived[wg] == WarpgroupLive(wg)) {
    s.wg_arrived[wg] = 0;
    ++s.wg_gen[wg];
  }
  _longjmp(s.sched, 1);
}

// Resumes fiber t until it waits or ends.
inline void RunFiber(int t) {
  State& s = S();
  if (s.done[t] || s.parked[t]) return;
  s.cur = t;
  threadIdx = {static_cast<unsigned>(t), 0, 0};
  if (!_setjmp(s.sched)) {
    if (!s.started[t]) {
      s.started[t] = 1;
      setcontext(&s.ctx[t]);
    }
    _longjmp(s.fiber[t].b, 1);
  }
}

// Runs fn() as every thread of every block of the grid, in S().schedule's order.
inline void Launch(EmuDim3 grid, int threads, const std::function<void()>& fn) {
  State& s = S();
  constexpr size_t kStack = 256 * 1024;
  s.nthreads = threads;
  s.ctx.resize(threads);
  s.fiber.resize(threads);
  s.started.assign(threads, 0);
  s.stacks.resize(threads);
  s.done.assign(threads, 0);
  s.parked.assign(threads, 0);
  s.copies.resize(threads);
  s.products.resize(threads);
  s.bulk.resize(threads);
  s.body = fn;
  gridDim = grid;
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        std::memset(smem_raw, 0xFF, sizeof(smem_raw));  // poison shared memory
        s.block_arrived = 0;
        s.mbars.clear();
        for (int i = 0; i < 16; ++i) s.named_arrived[i] = 0;
        for (int w = 0; w < 32; ++w) s.warp_arrived[w] = 0, s.warp_live[w] = 0;
        for (int w = 0; w < 8; ++w) s.wg_arrived[w] = 0;
        for (int t = 0; t < threads; ++t) {
          s.done[t] = 0;
          s.copies[t].assign(1, {});
          s.products[t].assign(1, {});
          s.bulk[t].assign(1, {});
          s.started[t] = 0;
          ++s.warp_live[t >> 5];
          s.stacks[t].resize(kStack);
          getcontext(&s.ctx[t]);
          s.ctx[t].uc_stack.ss_sp = s.stacks[t].data();
          s.ctx[t].uc_stack.ss_size = kStack;
          s.ctx[t].uc_link = nullptr;
          makecontext(&s.ctx[t], Trampoline, 0);
        }
        int live = threads;
        while (live > 0) {
          const long before = s.progress;
          live = 0;
          const int groups = (threads + 127) / 128;
          for (int gi = 0; gi < groups; ++gi) {
            const int grp = s.schedule == Schedule::kSkewDown ? groups - 1 - gi : gi;  // kSkewUpPark: up
            const int lo = s.schedule == Schedule::kLockstep ? 0 : grp * 128;
            const int hi = s.schedule == Schedule::kLockstep ? threads : std::min(threads, lo + 128);
            // Lockstep: one turn for every thread. Skewed: this warpgroup's
            // threads run until none of them can go on.
            long group_before;
            do {
              group_before = s.progress;
              for (int t = lo; t < hi; ++t) RunFiber(t);
            } while (s.schedule != Schedule::kLockstep && s.progress != group_before);
            for (int t = lo; t < hi; ++t) s.parked[t] = 0;
            if (s.schedule == Schedule::kLockstep) break;
          }
          for (int t = 0; t < threads; ++t) live += s.done[t] ? 0 : 1;
          if (live > 0 && s.progress == before) {
            std::fprintf(stderr, "emulator: deadlock: %d threads of block (%u, %u, %u) wait and none can go on\n", live,
                         blockIdx.x, blockIdx.y, blockIdx.z);
            std::abort();
          }
        }
        for (int t = 0; t < threads; ++t)
          if (s.bulk[t].size() > 1 || !s.bulk[t][0].empty()) {
            std::fprintf(stderr, "emulator: block (%u, %u, %u) ended with bulk reduces not waited for\n", blockIdx.x,
                         blockIdx.y, blockIdx.z);
            std::abort();
          }
      }
}

inline uint32_t SmemAddr(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < smem_raw || c >= smem_raw + sizeof(smem_raw)) {
    std::fprintf(stderr, "emulator: not a shared-memory address\n");
    std::abort();
  }
  return static_cast<uint32_t>(c - smem_raw);
}
inline uint16_t Ld16(uint32_t addr) {
  if (addr + 2 > sizeof(smem_raw)) std::abort();
  uint16_t v;
  std::memcpy(&v, smem_raw + addr, 2);
  return v;
}
inline void CpAsync16(uint32_t dst, const void* src, bool valid) {
  if (dst % 16 != 0 || dst + 16 > sizeof(smem_raw)) std::abort();
  S().copies[threadIdx.x].back().push_back({dst, src, 16, valid});
}
inline void CpAsync4(uint32_t dst, const void* src) {
  if (dst % 4 != 0 || dst + 4 > sizeof(smem_raw)) std::abort();
  S().copies[threadIdx.x].back().push_back({dst, src, 4, true});
}
inline void CpAsyncCommit() { S().copies[threadIdx.x].emplace_back(); }
// Lands this thread's committed groups but the newest n.
inline void CpAsyncWait(int n) {
  auto& groups = S().copies[threadIdx.x];
  while (static_cast<int>(groups.size()) - 1 > n) {
    for (const State::Copy& c : groups.front()) {
      if (c.valid) std::memcpy(smem_raw + c.dst, c.src, c.bytes);
      else std::memset(smem_raw + c.dst, 0, c.bytes);
    }
    groups.erase(groups.begin());
  }
}
inline int Lane() { return threadIdx.x & 31; }
inline int WarpBase() { return threadIdx.x & ~31u; }

inline void Ldsm4(uint32_t* r, uint32_t addr, bool trans) {
  State& s = S();
  if (addr % 16 != 0) std::abort();
  s.slot_u[threadIdx.x][0] = addr;
  WarpBarrier();
  const int lane = Lane(), wb = WarpBase(), g = lane >> 2, t = lane & 3;
  for (int m = 0; m < 4; ++m) {
    uint16_t lo, hi;
    if (!trans) {
      const uint32_t row = s.slot_u[wb + 8 * m + g][0];
      lo = Ld16(row + 4 * t);
      hi = Ld16(row + 4 * t + 2);
    } else {
      lo = Ld16(s.slot_u[wb + 8 * m + 2 * t][0] + 2 * g);
      hi = Ld16(s.slot_u[wb + 8 * m + 2 * t + 1][0] + 2 * g);
    }
    r[m] = lo | (static_cast<uint32_t>(hi) << 16);
  }
  WarpBarrier();
}

inline float Half(uint32_t u, int j, bool bf16) {
  const uint16_t h = static_cast<uint16_t>(j ? u >> 16 : u & 0xFFFF);
  return bf16 ? __bfloat162float({h}) : __half2float({h});
}

inline void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1, bool bf16) {
  State& s = S();
  for (int i = 0; i < 4; ++i) s.slot_u[threadIdx.x][i] = a[i];
  s.slot_u[threadIdx.x][4] = b0;
  s.slot_u[threadIdx.x][5] = b1;
  WarpBarrier();
  const int lane = Lane(), wb = WarpBase(), g = lane >> 2, t = lane & 3;
  float A[16][16], B[16][8];
  for (int L = 0; L < 32; ++L) {
    const uint32_t* u = s.slot_u[wb + L];
    const int gg = L >> 2, tt = L & 3;
    for (int j = 0; j < 2; ++j) {
      A[gg][2 * tt + j] = Half(u[0], j, bf16);
      A[gg + 8][2 * tt + j] = Half(u[1], j, bf16);
      A[gg][2 * tt + 8 + j] = Half(u[2], j, bf16);
      A[gg + 8][2 * tt + 8 + j] = Half(u[3], j, bf16);
      B[2 * tt + j][gg] = Half(u[4], j, bf16);
      B[2 * tt + 8 + j][gg] = Half(u[5], j, bf16);
    }
  }
  for (int k = 0; k < 16; ++k) {
    c[0] += A[g][k] * B[k][2 * t];
    c[1] += A[g][k] * B[k][2 * t + 1];
    c[2] += A[g + 8][k] * B[k][2 * t];
    c[3] += A[g + 8][k] * B[k][2 * t + 1];
  }
  WarpBarrier();
}

// A wgmma shared-memory descriptor (wgmma.cuh's Desc): start address,
// leading and stride byte offsets. Only the 128-byte swizzle is modelled, with
// starts whose row bits (7-9) are zero: the pattern's phase is then the
// address's own, as with the tiles' 1024-byte-aligned panels.
struct WgDesc {
  uint32_t start, lbo, sbo;
};
inline WgDesc DecodeDesc(uint64_t d) {
  const WgDesc r{static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4,
                 static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4};
  if ((d >> 62) != 1 || ((r.start >> 7) & 7) != 0) {
    std::fprintf(stderr, "emulator: a wgmma descriptor outside the modelled forms "
                         "(128-byte swizzle, pattern-aligned start)\n");
    std::abort();
  }
  return r;
}
// The 128-byte swizzle: 16-byte chunk bits 4-6 of an address XOR its row bits 7-9.
inline uint32_t Sw128(uint32_t a) { return a ^ (((a >> 7) & 7) << 4); }
// Element (row r, k) of a K-major operand: 8-row groups sbo apart, rows 128
// bytes apart, k contiguous.
inline uint32_t KMajorAddr(const WgDesc& d, int r, int k) { return Sw128(d.start + (r >> 3) * d.sbo + (r & 7) * 128 + 2 * k); }
inline float KMajor(const WgDesc& d, int r, int k, bool bf16) {
  const uint16_t h = Ld16(KMajorAddr(d, r, k));
  return bf16 ? __bfloat162float({h}) : __half2float({h});
}
// Element (k, n) of an MN-major operand (the transpose bit): k's 8-row groups
// sbo apart, rows 128 bytes apart, n in 64-element panels lbo apart.
inline uint32_t MnMajorAddr(const WgDesc& d, int k, int n) {
  return Sw128(d.start + (k >> 3) * d.sbo + (k & 7) * 128 + (n >> 6) * d.lbo + 2 * (n & 63));
}
inline float MnMajor(const WgDesc& d, int k, int n, bool bf16) {
  const uint16_t h = Ld16(MnMajorAddr(d, k, n));
  return bf16 ? __bfloat162float({h}) : __half2float({h});
}
// The raw shared-memory elements this thread's part of a product reads: its
// A rows (unless A is in registers) and its B columns.
inline std::vector<uint16_t> WgOperandBits(int n, uint64_t a_desc, bool has_a_reg, uint64_t b_desc, bool trans_b) {
  std::vector<uint16_t> v;
  const int me = threadIdx.x, w = (me >> 5) & 3, lane = me & 31, g = lane >> 2, t = lane & 3;
  if (!has_a_reg) {
    const WgDesc da = DecodeDesc(a_desc);
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < 16; ++k) v.push_back(Ld16(KMajorAddr(da, 16 * w + g + 8 * r, k)));
  }
  const WgDesc db = DecodeDesc(b_desc);
  for (int i = 0; i < n / 8; ++i)
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < 16; ++k) {
        const int col = 8 * i + 2 * t + c;
        v.push_back(Ld16(trans_b ? MnMajorAddr(db, k, col) : KMajorAddr(db, col, k)));
      }
  return v;
}

// wgmma.mma_async m64nNk16, f32 accumulators: d (+)= A B. A is 64 x 16, from
// shared memory (a_desc, K-major; a_reg null) or from registers (a_reg: this
// thread's four, mma.sync's A layout for its warp's 16 rows); B is 16 x N
// from shared memory, K-major or (trans_b) MN-major. Thread (warp w of the
// group, g, t) owns d[4i + 2r + c] = (row 16w + g + 8r, column 8i + 2t + c).
// Every thread of the warpgroup must pass the same descriptors.
inline void WgmmaRun(float* d, int n, uint64_t a_desc, const uint32_t* a_reg, uint64_t b_desc, bool trans_b,
                     bool accumulate, bool bf16) {
  State& s = S();
  const int me = threadIdx.x, base = me & ~127;
  for (int i = 0; i < 4; ++i) s.slot_u[me][i] = a_reg != nullptr ? a_reg[i] : 0;
  s.slot_d[me][0] = a_desc, s.slot_d[me][1] = b_desc;
  WarpgroupBarrier();
  for (int o = base; o < base + 128; ++o)
    if (s.slot_d[o][0] != a_desc || s.slot_d[o][1] != b_desc) {
      std::fprintf(stderr, "emulator: wgmma descriptors differ across the warpgroup\n");
      std::abort();
    }
  const int w = (me >> 5) & 3, lane = me & 31, g = lane >> 2, t = lane & 3;
  float A[2][16];
  if (a_reg == nullptr) {
    const WgDesc da = DecodeDesc(a_desc);
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < 16; ++k) A[r][k] = KMajor(da, 16 * w + g + 8 * r, k, bf16);
  } else {
    for (int tt = 0; tt < 4; ++tt) {
      const uint32_t* u = s.slot_u[(me & ~31) + 4 * g + tt];
      for (int j = 0; j < 2; ++j) {
        A[0][2 * tt + j] = Half(u[0], j, bf16), A[1][2 * tt + j] = Half(u[1], j, bf16);
        A[0][2 * tt + 8 + j] = Half(u[2], j, bf16), A[1][2 * tt + 8 + j] = Half(u[3], j, bf16);
      }
    }
  }
  const WgDesc db = DecodeDesc(b_desc);
  for (int i = 0; i < n / 8; ++i)
    for (int c = 0; c < 2; ++c) {
      const int col = 8 * i + 2 * t + c;
      float B[16];
      for (int k = 0; k < 16; ++k) B[k] = trans_b ? MnMajor(db, k, col, bf16) : KMajor(db, col, k, bf16);
      for (int r = 0; r < 2; ++r) {
        float sum = 0.f;
        for (int k = 0; k < 16; ++k) sum += A[r][k] * B[k];
        float& out = d[4 * i + 2 * r + c];
        out = accumulate ? out + sum : sum;
      }
    }
  WarpgroupBarrier();
}
// wgmma.mma_async: queued in this thread's open group, computed at the wait
// that retires it. Its shared-memory operands may be read at any moment in
// between, so they must hold the same bits at the issue and at the wait: a
// product issued before every writer of its operands is done (a missing
// barrier), or an operand overwritten while it is in flight, stops the
// emulation.
inline void Wgmma(float* d, int n, uint64_t a_desc, const uint32_t* a_reg, uint64_t b_desc, bool trans_b,
                  bool accumulate, bool bf16) {
  State::Product p{d,     n,          a_desc, b_desc, {0, 0, 0, 0}, a_reg != nullptr, trans_b, accumulate,
                   bf16,  WgOperandBits(n, a_desc, a_reg != nullptr, b_desc, trans_b)};
  if (a_reg != nullptr) std::memcpy(p.a_reg, a_reg, sizeof(p.a_reg));
  S().products[threadIdx.x].back().push_back(p);
}
inline void WgmmaCommit() { S().products[threadIdx.x].emplace_back(); }
// Computes this thread's committed groups but the newest n, in issue order
// (every thread of the warpgroup holds the same list: the calls are aligned).
inline void WgmmaWait(int n) {
  auto& groups = S().products[threadIdx.x];
  while (static_cast<int>(groups.size()) - 1 > n) {
    const std::vector<State::Product> g = std::move(groups.front());
    groups.erase(groups.begin());
    for (const State::Product& p : g) {
      if (WgOperandBits(p.n, p.a_desc, p.has_a_reg, p.b_desc, p.trans_b) != p.seen) {
        std::fprintf(stderr, "emulator: a wgmma's shared-memory operand changed between its issue and its wait\n");
        std::abort();
      }
      WgmmaRun(p.d, p.n, p.a_desc, p.has_a_reg ? p.a_reg : nullptr, p.b_desc, p.trans_b, p.accumulate, p.bf16);
    }
  }
}

// --- Hopper's asynchronous barriers and tensor copies (tma.cuh) ---------

inline State::Mbar& FindMbar(uint32_t addr) {
  for (auto& [a, m] : S().mbars)
    if (a == addr) return m;
  std::fprintf(stderr, "emulator: mbarrier at %u used before init\n", addr);
  std::abort();
}
inline void MbarInit(uint32_t addr, int count) {
  if (addr % 8 != 0 || count < 1) std::abort();
  for (auto& [a, m] : S().mbars)
    if (a == addr) {
      std::fprintf(stderr, "emulator: mbarrier at %u initialised twice\n", addr);
      std::abort();
    }
  State::Mbar m;
  m.count = m.pending = count;
  S().mbars.emplace_back(addr, std::move(m));
}
// Writes the copies of completed phases to shared memory.
inline void MbarLand(State::Mbar& m) {
  for (auto& [dst, bytes] : m.unlanded) std::memcpy(smem_raw + dst, bytes.data(), bytes.size());
  m.unlanded.clear();
}
// Completes the phase once every arrival and every expected byte is in. Its
// tensor copies land at the latest moment the hardware allows: when a thread
// sees the phase complete in a wait (or, unwaited for, when the next phase
// completes), so a thread that reads a tile without waiting reads poison or
// the stage's previous tile.
inline void MbarTryComplete(State::Mbar& m) {
  if (m.pending > 0 || m.tx != 0) return;
  MbarLand(m);
  m.unlanded = std::move(m.landing);
  m.landing.clear();
  ++m.completed;
  m.pending = m.count;
  ++S().progress;
}
// An arrival without a wait: under kSkewUpPark the highest warpgroup's
// thread ends its turn here.
inline void Park() {
  State& s = S();
  if (s.schedule != Schedule::kSkewUpPark || s.cur / 128 != (s.nthreads - 1) / 128) return;
  s.parked[s.cur] = 1;
  Yield();
}
inline void MbarArrive(uint32_t addr) {
  State::Mbar& m = FindMbar(addr);
  if (m.pending <= 0) std::abort();
  --m.pending;
  ++S().progress;
  MbarTryComplete(m);
  Park();
}
inline void MbarArriveExpectTx(uint32_t addr, int64_t bytes) {
  FindMbar(addr).tx += bytes;
  MbarArrive(addr);
}
// Returns once the phase of the given parity has completed: a fresh
// barrier is in phase 0, so waiting on parity 1 returns at once.
inline void MbarWait(uint32_t addr, int parity) {
  while ((FindMbar(addr).completed & 1) == parity) Yield();
  MbarLand(FindMbar(addr));
}
// bar.sync / bar.arrive: `n` threads in all, some waiting, some only arriving.
inline void NamedCount(int id, int n) {
  State& s = S();
  if (id < 0 || id > 15 || n % 32 != 0) std::abort();
  ++s.progress;
  if (++s.named_arrived[id] == n) s.named_arrived[id] = 0, ++s.named_gen[id];
}
inline void NamedArrive(int id, int n) {
  NamedCount(id, n);
  Park();
}
inline void NamedSync(int id, int n) {
  State& s = S();
  const long gen = s.named_gen[id];
  NamedCount(id, n);
  while (s.named_gen[id] == gen) Yield();
}
// A tensor map of up to 4 dims as tma.cuh's TmaMap describes it on the
// host: element size, dims (innermost first; 1 where the tensor has fewer),
// byte strides of dims 1-3, and the box: box_cols elements of dim 0 by
// box_rows of dim 1, stored with the 128-byte swizzle (rows of 128 bytes)
// or unswizzled.
struct TmaMap {
  const unsigned char* base = nullptr;
  int64_t dim[4] = {1, 1, 1, 1};
  int64_t stride[4] = {};
  int box_rows = 1, box_cols = 64, elem = 2;
  bool swizzle = true;
};
// cp.async.bulk.tensor: the box at (c0, c1, c2, c3) into shared memory at
// dst (1024-byte aligned when swizzled, else 128), elements outside the
// tensor as zeros; the bytes count against `bar`'s expected bytes. The
// destination holds poison from the issue until the data lands, when a
// thread waits for the phase that completes them: the earliest and the
// latest moments the hardware allows, so that both a read of the old tile
// after the refill was issued and a read of the new one before its wait
// see poison.
// Calls fn(offset in the box's shared-memory image, element address) for
// every element of the box at (c0, c1, c2, c3) inside the tensor.
template <class Fn>
void TmaBoxVisit(const TmaMap& map, int c0, int c1, int c2, int c3, Fn fn) {
  const int row_bytes = map.box_cols * map.elem;
  const bool outer_in = c2 >= 0 && c2 < map.dim[2] && c3 >= 0 && c3 < map.dim[3];
  for (int r = 0; r < map.box_rows; ++r) {
    const int64_t row = static_cast<int64_t>(c1) + r;
    for (int c = 0; c < row_bytes / 16; ++c) {
      const int at = r * row_bytes + ((map.swizzle ? c ^ (r & 7) : c) << 4);
      for (int e = 0; e < 16 / map.elem; ++e) {
        const int64_t col = static_cast<int64_t>(c0) + c * (16 / map.elem) + e;
        if (!outer_in || row < 0 || row >= map.dim[1] || col < 0 || col >= map.dim[0]) continue;
        fn(at + e * map.elem, map.base + col * map.elem + row * map.stride[1] + c2 * map.stride[2] + c3 * map.stride[3]);
      }
    }
  }
}
// The box's size in bytes, after checking its shared-memory address, its
// form, and its innermost start, which the hardware wants on 16 bytes.
inline int64_t TmaBoxBytes(const TmaMap& map, uint32_t smem, int c0) {
  if (static_cast<int64_t>(c0) * map.elem % 16 != 0) {
    std::fprintf(stderr, "emulator: a tensor copy's innermost start (element %d) is not on 16 bytes\n", c0);
    std::abort();
  }
  const int row_bytes = map.box_cols * map.elem;
  if (smem % (map.swizzle ? 1024 : 128) != 0 || (map.swizzle && row_bytes != 128) || row_bytes % 16 != 0) std::abort();
  const int64_t bytes = static_cast<int64_t>(map.box_rows) * row_bytes;
  if (smem + bytes > sizeof(smem_raw)) std::abort();
  return bytes;
}
inline void TmaLoad(uint32_t dst, const TmaMap& map, int c0, int c1, int c2, int c3, uint32_t bar) {
  const int64_t bytes = TmaBoxBytes(map, dst, c0);
  std::vector<unsigned char> box(bytes, 0);
  TmaBoxVisit(map, c0, c1, c2, c3,
              [&](int at, const unsigned char* g) { std::memcpy(box.data() + at, g, map.elem); });
  // The destination is in flux from the issue on (poison: NaN in bf16, f16
  // and f32), so a thread still reading the stage's previous tile then
  // reads poison; the data itself lands when a thread waits for it.
  std::memset(smem_raw + dst, 0xFF, bytes);
  State::Mbar& m = FindMbar(bar);
  m.landing.emplace_back(dst, std::move(box));
  m.tx -= bytes;
  if (m.tx < 0) {
    std::fprintf(stderr, "emulator: a tensor copy of %lld bytes not announced to its mbarrier\n",
                 static_cast<long long>(bytes));
    std::abort();
  }
  MbarTryComplete(m);
}

// cp.reduce.async.bulk.tensor .add (f32): the shared-memory box at src added
// into the tensor at (c0, c1, c2, c3), elements outside it skipped. The box
// is read at the issue, the earliest moment; cp.async.bulk.wait_group.read,
// the latest, checks that it still holds what was read, so a write over the
// source before the wait (or a block that ends without waiting) is caught,
// and a box issued before its writers finished carries their old values.
inline void TmaReduceAdd(const TmaMap& map, uint32_t src, int c0, int c1, int c2, int c3) {
  if (map.elem != 4) std::abort();
  const int64_t bytes = TmaBoxBytes(map, src, c0);
  TmaBoxVisit(map, c0, c1, c2, c3, [&](int at, const unsigned char* g) {
    float a, b;
    std::memcpy(&a, smem_raw + src + at, 4);
    std::memcpy(&b, g, 4);
    b += a;
    std::memcpy(const_cast<unsigned char*>(g), &b, 4);
  });
  S().bulk[threadIdx.x].back().push_back({src, std::vector<unsigned char>(smem_raw + src, smem_raw + src + bytes)});
}
inline void BulkCommit() { S().bulk[threadIdx.x].emplace_back(); }
inline void BulkWaitRead(int n) {
  auto& groups = S().bulk[threadIdx.x];
  while (static_cast<int>(groups.size()) - 1 > n) {
    for (const State::Reduce& r : groups.front())
      if (std::memcmp(smem_raw + r.src, r.bytes.data(), r.bytes.size()) != 0) {
        std::fprintf(stderr, "emulator: the source of a bulk reduce changed before its wait_group.read\n");
        std::abort();
      }
    groups.erase(groups.begin());
  }
}

inline float ShflXor(float v, int off) {
  State& s = S();
  s.slot_f[threadIdx.x] = v;
  WarpBarrier();
  const float r = s.slot_f[WarpBase() + (Lane() ^ off)];
  WarpBarrier();
  return r;
}

inline void RedAddV4(float* p, float a, float b, float c, float d) {
  p[0] += a;
  p[1] += b;
  p[2] += c;
  p[3] += d;
}

}  // namespace emu

inline float __shfl_xor_sync(unsigned, float v, int off) { return emu::ShflXor(v, off); }
inline void __syncthreads() { emu::BlockBarrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::WarpBarrier(); }
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}

}  // namespace loom::kernels::cuda::attention
