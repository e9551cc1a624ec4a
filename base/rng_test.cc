#include "base/rng.h"

#include <cmath>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(Philox, DeterministicAndDistinctStreams) {
  Philox a(42, 0), b(42, 0), c(42, 1), d(43, 0);
  int same_c = 0, same_d = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(a.Bits(i), b.Bits(i));
    same_c += a.Bits(i) == c.Bits(i);
    same_d += a.Bits(i) == d.Bits(i);
  }
  EXPECT_LT(same_c, 3);
  EXPECT_LT(same_d, 3);
}

TEST(Philox, UniformMomentsMatch) {
  Philox r(7, 3);
  const int n = 200000;
  double sum = 0, sq = 0, nsum = 0, nsq = 0;
  for (int i = 0; i < n; ++i) {
    double u = r.Uniform(i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sq += u * u;
    double z = r.Normal(i);
    nsum += z;
    nsq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sq / n - 0.25, 1.0 / 12, 0.003);
  EXPECT_NEAR(nsum / n, 0.0, 0.01);
  EXPECT_NEAR(nsq / n, 1.0, 0.02);
}

}  // namespace
}  // namespace loom
