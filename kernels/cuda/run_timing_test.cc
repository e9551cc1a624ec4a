#include "kernels/cuda/run_timing.h"

#include <gtest/gtest.h>

namespace loom::kernels::cuda {
namespace {

TEST(RunTiming, BatchHoldsAboutTheTargetTime) {
  EXPECT_EQ(TimingRunsPerBatch(kTimingBatchMs), 1);
  EXPECT_EQ(TimingRunsPerBatch(5.0), 1);                   // one long run is its own batch
  EXPECT_EQ(TimingRunsPerBatch(0.06), 5);                  // 0.3 / 0.06
  EXPECT_EQ(TimingRunsPerBatch(0.07), 5);                  // rounded up: a batch of at least the target
  EXPECT_EQ(TimingRunsPerBatch(0.001), kTimingMaxRuns);    // capped
  EXPECT_EQ(TimingRunsPerBatch(0.0), kTimingMaxRuns);      // an event pair that read 0
  EXPECT_EQ(TimingRunsPerBatch(-1.0), kTimingMaxRuns);
  for (double ms = 0.001; ms < 2; ms *= 1.37) {
    const int n = TimingRunsPerBatch(ms);
    ASSERT_GE(n, 1);
    ASSERT_LE(n, kTimingMaxRuns);
    if (n < kTimingMaxRuns) EXPECT_GE(n * ms, kTimingBatchMs * (1 - 1e-12)) << ms;
    if (n > 1) EXPECT_LT((n - 1) * ms, kTimingBatchMs) << ms;
  }
}

// Without a GPU (this machine) the events cannot be made, and the error
// comes back before any run is enqueued. With one: a warm-up, an estimate,
// and three batches of equal size.
TEST(RunTiming, CountsItsRunsOrReportsTheError) {
  int runs = 0;
  absl::StatusOr<double> ms = TimeRuns(nullptr, [&] {
    ++runs;
    return absl::OkStatus();
  });
  if (!ms.ok()) {
    EXPECT_EQ(runs, 0) << ms.status();
    return;
  }
  EXPECT_GE(*ms, 0.0);
  EXPECT_GE(runs, 2 + kTimingBatches);
  EXPECT_EQ((runs - 2) % kTimingBatches, 0);
}

}  // namespace
}  // namespace loom::kernels::cuda
