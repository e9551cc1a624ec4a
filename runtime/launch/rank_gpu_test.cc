// PickRankGpu: the GPU a device: cuda worker's rank trains on and the one
// device it leaves visible (rank_gpu.h).
#include "runtime/launch/rank_gpu.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace loom::runtime::launch {
namespace {

// Without an agent (LOOM_GPU unset) rank r takes GPU r / ranks_per_gpu of the
// machine, or that entry of an inherited list; the process' ordinal is 0.
TEST(RankGpu, WithoutAnAgentTheRankSharesGpuRankOverRanksPerGpu) {
  for (int rank = 0; rank < 4; ++rank) {
    auto g = PickRankGpu(nullptr, nullptr, rank, 2);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->gpu, rank / 2) << "rank " << rank;
    EXPECT_EQ(g->visible, std::to_string(rank / 2)) << "rank " << rank;
    EXPECT_EQ(g->device, 0);
    auto one = PickRankGpu("", "", rank, 1);  // empty is unset
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(one->gpu, rank);
    auto listed = PickRankGpu(nullptr, "4,5,6,7", rank, 2);
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_EQ(listed->visible, std::to_string(4 + rank / 2)) << "rank " << rank;
  }
}

// Under an agent LOOM_GPU names the GPU; the agent has narrowed
// CUDA_VISIBLE_DEVICES to it already, which is kept as it is.
TEST(RankGpu, AnAgentsPlacementWins) {
  auto narrowed = PickRankGpu("1", "3", /*rank=*/2, 2);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(narrowed->gpu, 1);
  EXPECT_EQ(narrowed->visible, "3");
  EXPECT_EQ(narrowed->device, 0);
  auto whole = PickRankGpu("1", nullptr, /*rank=*/0, 2);  // LOOM_GPU, not rank / ranks_per_gpu
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->visible, "1");
  auto listed = PickRankGpu("2", "0,1,5,7", /*rank=*/0, 1);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->visible, "5");
}

TEST(RankGpu, BadValuesAreRefusedByName) {
  auto bad = PickRankGpu("x", nullptr, 0, 1);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(bad.status().message()).rfind("LOOM_GPU: ", 0), 0u) << bad.status();
  EXPECT_FALSE(PickRankGpu("-1", nullptr, 0, 1).ok());  // a CPU rank's value
  auto outside = PickRankGpu("2", "0,1", 0, 1);
  ASSERT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(outside.status().message()).find("LOOM_GPU 2 is outside CUDA_VISIBLE_DEVICES '0,1'"),
            std::string::npos)
      << outside.status();
  auto unplaced = PickRankGpu(nullptr, "0,1", 5, 2);
  ASSERT_FALSE(unplaced.ok());
  EXPECT_NE(std::string(unplaced.status().message()).find("rank 5 / resources.ranks_per_gpu 2 = GPU 2"),
            std::string::npos)
      << unplaced.status();
}

TEST(RankGpu, ApplySetsTheVariable) {
  auto g = PickRankGpu(nullptr, "4,5", 3, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(ApplyRankGpu(*g).ok());
  ASSERT_NE(std::getenv("CUDA_VISIBLE_DEVICES"), nullptr);
  EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")), "5");
}

}  // namespace
}  // namespace loom::runtime::launch
