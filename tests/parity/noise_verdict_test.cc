// FinalWithinNoise on made-up gaps: Loom's gap is the median over its runs
// when it ran several, bounded by the largest of torch's f32 runs.
#include "gtest/gtest.h"
#include "tests/parity/parity_runner.h"

namespace loom::tests::parity {
namespace {

ParityResult Gaps(double loom, std::vector<double> loom_runs, double torch, double torch_others) {
  ParityResult r;
  r.final_rel_f64["w"] = loom;
  r.torch_final_rel_f64["w"] = torch;
  r.noise_final_rel_f64["w"] = torch_others;
  if (!loom_runs.empty()) r.loom_noise_final_rel_f64["w"] = std::move(loom_runs);
  return r;
}

TEST(NoiseVerdict, OneLoomRunIsBoundedByTorchsLargest) {
  EXPECT_TRUE(FinalWithinNoise(Gaps(3.9e-6, {}, 1e-6, 2e-6), 2, 1e-6).ok);
  const NoiseVerdict v = FinalWithinNoise(Gaps(4.1e-6, {}, 1e-6, 2e-6), 2, 1e-6);
  EXPECT_FALSE(v.ok);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_NE(v.failures[0].find("w: loom 4.10e-06 > 2 x torch 2.00e-06"), std::string::npos) << v.failures[0];
}

TEST(NoiseVerdict, LoomsMedianDecidesAndTheFloorStillHolds) {
  // One run in the far hump, four near torch: the median passes.
  EXPECT_TRUE(FinalWithinNoise(Gaps(7e-6, {1.1e-6, 0.9e-6, 5e-6, 1.3e-6}, 1e-6, 2e-6), 2, 1e-6).ok);
  // Consistently worse: three of five runs over the bound fail it.
  const NoiseVerdict v = FinalWithinNoise(Gaps(1e-6, {4.5e-6, 5e-6, 0.8e-6, 6e-6}, 1e-6, 2e-6), 2, 1e-6);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.worst, "w (2.25)");
  // Even count: the mean of the middle two.
  EXPECT_DOUBLE_EQ(Gaps(1e-6, {2e-6, 3e-6, 4e-6}, 1, 1).LoomFinalGap("w"), 2.5e-6);
  // Under the floor passes whatever torch's gap.
  EXPECT_TRUE(FinalWithinNoise(Gaps(9e-7, {9e-7, 9e-7}, 1e-9, 1e-9), 2, 1e-6).ok);
}

TEST(NoiseVerdict, NoReferenceIsAFailure) {
  const NoiseVerdict v = FinalWithinNoise(ParityResult{}, 2, 1e-6);
  EXPECT_FALSE(v.ok);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_NE(v.failures[0].find("no f64 reference"), std::string::npos);
}

}  // namespace
}  // namespace loom::tests::parity
