#include "base/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 7, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 3, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(8, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      pool.ParallelFor(10, 1, [&](int64_t a, int64_t b) { sum += b - a; });
  });
  EXPECT_EQ(sum.load(), 80);
}

TEST(ThreadPool, GlobalIsResizable) {
  SetNumThreads(3);
  EXPECT_EQ(NumThreads(), 3);
  SetNumThreads(1);
  std::atomic<int> calls{0};
  ParallelFor(100, 1, [&](int64_t, int64_t) { calls++; });
  EXPECT_EQ(calls.load(), 1);  // one thread: a single inline call
}

}  // namespace
}  // namespace loom
