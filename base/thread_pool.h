// A fixed pool of worker threads for data-parallel loops on the host.
//
// The global pool has NumThreads() threads: LOOM_NUM_THREADS if set (an agent
// sets it for each rank it starts, from resources.threads_per_rank), otherwise
// UsableCpus() (base/usable_cpus.h). SetNumThreads() resizes it (not while a
// ParallelFor is running). ParallelFor splits [0, n) into chunks of at least
// `grain` iterations; the calling thread takes part, so a pool of size 1 runs
// everything inline.
//
//   ParallelFor(rows, /*grain=*/16, [&](int64_t lo, int64_t hi) {
//     for (int64_t r = lo; r < hi; ++r) ...;
//   });
//
// Nested ParallelFor calls from inside a worker run inline (no deadlock).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  static ThreadPool& Global();

 private:
  void WorkerLoop(int id);
  void RunChunks();

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_ = 0;
  // The job in flight.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, num_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::mutex run_mu_;  // one ParallelFor at a time per pool
};

int NumThreads();
void SetNumThreads(int n);
inline void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::Global().ParallelFor(n, grain, fn);
}

}  // namespace loom
