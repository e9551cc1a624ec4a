#include "base/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "base/usable_cpus.h"

namespace loom {
namespace {

thread_local bool t_in_worker = false;

int DefaultThreads() {
  if (const char* env = std::getenv("LOOM_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return UsableCpus();
}

std::mutex g_mu;
std::unique_ptr<ThreadPool> g_pool;

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    int64_t c = next_chunk_.fetch_add(1);
    if (c >= num_chunks_) return;
    int64_t lo = c * chunk_;
    int64_t hi = std::min(n_, lo + chunk_);
    (*fn_)(lo, hi);
  }
}

void ThreadPool::WorkerLoop(int) {
  t_in_worker = true;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      start_cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunChunks();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  if (num_threads_ == 1 || max_chunks == 1 || t_in_worker) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  // A few chunks per thread balances uneven work without much overhead.
  int64_t chunks = std::min<int64_t>(max_chunks, num_threads_ * 4);
  {
    std::lock_guard<std::mutex> l(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    num_chunks_ = (n + chunk_ - 1) / chunk_;
    next_chunk_.store(0);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  t_in_worker = true;
  RunChunks();
  t_in_worker = false;
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait(l, [&] { return active_ == 0; });
  fn_ = nullptr;
}

ThreadPool& ThreadPool::Global() {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(DefaultThreads());
  return *g_pool;
}

int NumThreads() { return ThreadPool::Global().num_threads(); }

void SetNumThreads(int n) {
  std::lock_guard<std::mutex> l(g_mu);
  g_pool = std::make_unique<ThreadPool>(n > 0 ? n : DefaultThreads());
}

}  // namespace loom
