#include "runtime/service/job_metrics.h"

#include <gtest/gtest.h>

namespace loom::runtime::service {
namespace {

v1::MetricPoint At(int64_t step, int32_t rank = 0, double loss = 1.0) {
  v1::MetricPoint p;
  p.set_step(step);
  p.set_rank(rank);
  p.set_loss(loss);
  return p;
}

TEST(JobMetrics, AfterStepIsAscendingAndExclusive) {
  JobMetrics m;
  m.Add(1, At(3, 1));
  m.Add(1, At(1));
  m.Add(1, At(3, 0));
  m.Add(1, At(2));
  m.Add(2, At(9));
  auto pts = m.After(1, 1);
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].step(), 2);
  EXPECT_EQ(pts[1].step(), 3);
  EXPECT_EQ(pts[1].rank(), 0);
  EXPECT_EQ(pts[2].rank(), 1);
  EXPECT_EQ(m.After(1, -1).size(), 4u);
  EXPECT_TRUE(m.After(3, -1).empty());
}

// The bound holds however many points arrive; the newest steps stay dense and
// the oldest steps survive, thinned evenly.
TEST(JobMetrics, RetentionBoundThinsOldPointsEvenly) {
  constexpr size_t kMax = 100;
  JobMetrics m(kMax, 4);
  constexpr int kSteps = 10000;
  for (int s = 1; s <= kSteps; ++s) {
    m.Add(7, At(s));
    ASSERT_LE(m.size(7), kMax) << "after step " << s;
  }
  auto pts = m.After(7, -1);
  EXPECT_GE(pts.size(), kMax / 2);
  EXPECT_EQ(pts.front().step(), 1) << "the first step is never thinned away";
  EXPECT_EQ(pts.back().step(), kSteps);
  // The most recent quarter of the bound is every step, without gaps.
  for (size_t i = pts.size() - kMax / 4; i + 1 < pts.size(); ++i) {
    EXPECT_EQ(pts[i + 1].step(), pts[i].step() + 1) << i;
  }
  // Gaps never shrink going back in time.
  for (size_t i = 1; i + 1 < pts.size(); ++i) {
    const int64_t gap_before = pts[i].step() - pts[i - 1].step();
    const int64_t gap_after = pts[i + 1].step() - pts[i].step();
    EXPECT_GE(gap_before, gap_after) << "at step " << pts[i].step();
  }
}

TEST(JobMetrics, FinishedJobsAreDroppedAfterKeptCount) {
  JobMetrics m(100, 2);
  for (int64_t job = 1; job <= 4; ++job) m.Add(job, At(1));
  m.Finished(1);
  m.Finished(2);
  EXPECT_EQ(m.size(1), 1u);
  m.Finished(3);
  EXPECT_EQ(m.size(1), 0u) << "job 1 fell out of the kept finished jobs";
  EXPECT_EQ(m.size(2), 1u);
  EXPECT_EQ(m.size(3), 1u);
  EXPECT_EQ(m.size(4), 1u) << "live jobs are never dropped";
}

TEST(JobMetrics, SequenceAndLatest) {
  JobMetrics m;
  uint64_t s1 = m.Add(1, At(1, 0, 5.0));
  v1::MetricPoint tps;
  tps.set_step(2);
  tps.set_tokens_per_s(1234.5);
  uint64_t s2 = m.Add(1, tps);
  EXPECT_LT(s1, s2);
  auto after = m.PointsAfterSeq(1, s1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].seq, s2);
  ASSERT_NE(m.LatestWithLoss(1), nullptr);
  EXPECT_EQ(m.LatestWithLoss(1)->loss(), 5.0);
  ASSERT_NE(m.LatestWithTokensPerS(1), nullptr);
  EXPECT_EQ(m.LatestWithTokensPerS(1)->tokens_per_s(), 1234.5);
  EXPECT_EQ(m.LatestWithLoss(2), nullptr);
}

}  // namespace
}  // namespace loom::runtime::service
