// The planner's single-process memory estimate against what Loom allocates,
// on held-out configurations: the high-water mark of a CountingAllocator
// around Trainer::Create and 3 Steps must be within 10% of Estimate's total()
// for dp = 1, tp = 1. None of these model sizes and batches is in the
// calibration set that parallel:planner_calibrate fits the coefficients on.
// Fast subset by default; LOOM_FULL=1 adds four more (two larger, two tiny).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "parallel/planner.h"
#include "base/testing/full_sweep.h"
#include "tests/parallel/memory_probe.h"

namespace loom::tests::parallel {
namespace {

using testing::ModelOf;

struct Config {
  v1::ModelSpec model;
  int64_t batch;
};

bool Full() { return loom::testing::FullSweep(); }

TEST(PlannerMemory, HeldOutSingleProcessEstimatesWithin10PercentOfMeasuredPeak) {
  SetNumThreads(1);
  std::vector<Config> configs = {
      {ModelOf("gpt", 3, 6, 6, 96, 48, 384), 6},     {ModelOf("gpt", 5, 4, 4, 160, 40, 320), 3},
      {ModelOf("gpt", 2, 2, 2, 48, 80, 200), 2},     {ModelOf("llama", 3, 6, 2, 96, 48, 384), 6},
      {ModelOf("llama", 2, 8, 4, 192, 24, 640), 5},  {ModelOf("llama", 4, 4, 1, 80, 56, 300), 3},
  };
  if (Full()) {
    configs.push_back({ModelOf("gpt", 6, 8, 8, 320, 96, 768), 4});
    configs.push_back({ModelOf("llama", 6, 8, 2, 320, 96, 768), 4});
    configs.push_back({ModelOf("gpt", 1, 2, 2, 24, 12, 100), 2});
    configs.push_back({ModelOf("llama", 1, 2, 1, 24, 12, 100), 2});
  }
  for (const Config& c : configs) {
    loom::parallel::Hardware hw;
    auto est = loom::parallel::Estimate(c.model, c.batch, hw, {1, 1, 0, false});
    ASSERT_TRUE(est.ok()) << est.status();
    auto measured = testing::TrainerPeakBytes(testing::TrainSpec(c.model, c.batch), 3);
    ASSERT_TRUE(measured.ok()) << measured.status();
    const double estimate = static_cast<double>(est->memory.total());
    const double err = (estimate - *measured) / *measured;
    EXPECT_LT(std::abs(err), 0.10) << testing::Describe(c.model, c.batch) << ": estimate " << estimate
                                   << " measured " << *measured;
    std::printf("%-42s estimate %11.0f measured %11lld (%+.1f%%)\n", testing::Describe(c.model, c.batch).c_str(),
                estimate, static_cast<long long>(*measured), 100 * err);
  }
}

// train.grad_accum_steps: a one-rank Trainer's peak with its micro-step,
// update program and accumulators against Estimate with the same k, within
// the same 10% (the accumulators are 15% of these totals).
TEST(PlannerMemory, GradientAccumulationEstimatesWithin10PercentOfMeasuredPeak) {
  SetNumThreads(1);
  const std::vector<Config> configs = {{ModelOf("gpt", 3, 6, 6, 96, 48, 384), 8},
                                       {ModelOf("llama", 3, 6, 2, 96, 48, 384), 8}};
  for (const Config& c : configs) {
    const int k = 4;
    loom::parallel::Hardware hw;
    auto est = loom::parallel::Estimate(c.model, c.batch, hw, {1, 1, 0, false}, nullptr, k);
    ASSERT_TRUE(est.ok()) << est.status();
    v1::JobSpec spec = testing::TrainSpec(c.model, c.batch);
    spec.mutable_train()->set_grad_accum_steps(k);
    auto measured = testing::TrainerPeakBytes(spec, 3);
    ASSERT_TRUE(measured.ok()) << measured.status();
    const double estimate = static_cast<double>(est->memory.total());
    const double err = (estimate - *measured) / *measured;
    EXPECT_LT(std::abs(err), 0.10) << testing::Describe(c.model, c.batch) << " k=" << k << ": estimate " << estimate
                                   << " measured " << *measured;
    std::printf("%-42s k=%d estimate %11.0f (accumulators %lld) measured %11lld (%+.1f%%)\n",
                testing::Describe(c.model, c.batch).c_str(), k, estimate,
                static_cast<long long>(est->memory.accumulators), static_cast<long long>(*measured), 100 * err);
  }
}

}  // namespace
}  // namespace loom::tests::parallel
