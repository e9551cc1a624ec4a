// A CPU emulation of the few CUDA features the flash-attention kernels use,
// for attention_emulation_test (host compiler, LOOM_ATTN_EMULATE): each thread
// of a block is a ucontext fiber on one OS thread, __syncthreads and the warp
// collectives (ldmatrix, mma.sync m16n8k16, __shfl_xor_sync) are barriers at
// which every lane deposits its operands and then computes its own result with
// the documented fragment layouts. Shared memory is one static array; cp.async
// copies at once. Slow (microseconds per collective) but exact in indexing:
// it checks the kernels' fragment and tile arithmetic without a GPU.
#pragma once

#include <setjmp.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
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
alignas(128) inline unsigned char smem_raw[1 << 18];
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace emu {

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
  int nthreads = 0, cur = 0;
  int block_arrived = 0;
  long block_gen = 0;
  int warp_arrived[32] = {};
  long warp_gen[32] = {};
  int warp_live[32] = {};
  uint32_t slot_u[1024][6];
  float slot_f[1024];
  std::function<void()> body;
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
  if (++s.warp_arrived[w] == s.warp_live[w]) {
    s.warp_arrived[w] = 0;
    ++s.warp_gen[w];
    return;
  }
  while (s.warp_gen[w] == gen) Yield();
}
inline void BlockBarrier() {
  State& s = S();
  const long gen = s.block_gen;
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
  --s.warp_live[threadIdx.x >> 5];
  // A warp barrier may now be complete without this thread.
  const int w = threadIdx.x >> 5;
  if (s.warp_arrived[w] > 0 && s.warp_arrived[w] == s.warp_live[w]) {
    s.warp_arrived[w] = 0;
    ++s.warp_gen[w];
  }
  _longjmp(s.sched, 1);
}

// Runs fn() as every thread of every block of the grid.
inline void Launch(EmuDim3 grid, int threads, const std::function<void()>& fn) {
  State& s = S();
  constexpr size_t kStack = 256 * 1024;
  s.nthreads = threads;
  s.ctx.resize(threads);
  s.fiber.resize(threads);
  s.started.assign(threads, 0);
  s.stacks.resize(threads);
  s.done.assign(threads, 0);
  s.body = fn;
  gridDim = grid;
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        std::memset(smem_raw, 0xFF, sizeof(smem_raw));  // poison shared memory
        s.block_arrived = 0;
        for (int w = 0; w < 32; ++w) s.warp_arrived[w] = 0, s.warp_live[w] = 0;
        for (int t = 0; t < threads; ++t) {
          s.done[t] = 0;
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
          live = 0;
          for (int t = 0; t < threads; ++t) {
            if (s.done[t]) continue;
            s.cur = t;
            threadIdx = {static_cast<unsigned>(t), 0, 0};
            if (!_setjmp(s.sched)) {
              if (!s.started[t]) {
                s.started[t] = 1;
                setcontext(&s.ctx[t]);
              }
              _longjmp(s.fiber[t].b, 1);
            }
            live += s.done[t] ? 0 : 1;
          }
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
  if (valid) std::memcpy(smem_raw + dst, src, 16);
  else std::memset(smem_raw + dst, 0, 16);
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
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}

}  // namespace loom::kernels::cuda::attention
