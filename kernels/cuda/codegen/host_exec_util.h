// Helpers of the host-execution tests (pointwise_host_exec_test,
// rowwise_host_exec_test), which compile generated CUDA sources with the host
// C++ compiler and run them through a shim.
#pragma once

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace loom::kernels::cuda::codegen {

// The CUDA execution model on the host, for kernels compiled by the host C++
// compiler: each thread of a block is a host thread; __syncthreads is a
// barrier; a warp shuffle exchanges through a shared array between two
// barriers (so every thread of the block must take part, as in the kernels'
// block reductions); __shared__ is a function-local static, and blocks run
// one after another. loom_host_run(grid, block, f) runs f as every thread of
// a 1D grid (grid.x blocks, then grid.y rows of them) of 1D blocks.
inline constexpr char kBlockThreadsShim[] = R"(// Host shim: CUDA threads as host threads.
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <functional>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__
struct LoomDim3 { unsigned int x, y, z; };
static LoomDim3 gridDim = {1, 1, 1}, blockDim = {1, 1, 1}, blockIdx = {0, 0, 0};
static thread_local LoomDim3 threadIdx = {0, 0, 0};
static pthread_barrier_t loom_bar;
static float loom_xchg[1024];
static inline void __syncthreads() { pthread_barrier_wait(&loom_bar); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline float __shfl_xor_sync(unsigned, float v, int m) {
  const unsigned t = threadIdx.x;
  loom_xchg[t] = v;
  __syncthreads();
  const float r = loom_xchg[t ^ (unsigned)m];
  __syncthreads();
  return r;
}
static void loom_host_run(LoomDim3 grid, unsigned block, const std::function<void()>& f) {
  gridDim = {grid.x, grid.y, 1};
  blockDim = {block, 1, 1};
  pthread_barrier_init(&loom_bar, nullptr, block);
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned b = 0; b < grid.x; ++b) {
      blockIdx = {b, by, 0};
      std::vector<std::thread> th;
      for (unsigned t = 0; t < block; ++t) th.emplace_back([&f, t] { threadIdx = {t, 0, 0}; f(); });
      for (std::thread& x : th) x.join();
    }
  pthread_barrier_destroy(&loom_bar);
}
static void loom_host_run(unsigned grid, unsigned block, const std::function<void()>& f) {
  loom_host_run(LoomDim3{grid, 1, 1}, block, f);
}
)";

// The first host C++ compiler found, or "" (the tests then fail).
inline std::string FindHostCompiler() {
  for (const char* c : {"/usr/bin/g++", "/usr/bin/c++", "/usr/bin/clang++"})
    if (::access(c, X_OK) == 0) return c;
  return "";
}

// The whole file (empty when it cannot be read): compiler logs for failures.
inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace loom::kernels::cuda::codegen
