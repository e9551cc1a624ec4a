#include "runtime/service/scheduler.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace loom::runtime::service {
namespace {

Demand Cpu(int n) { return Demand{n, false}; }

TEST(Scheduler, GangPlacesAllRanksOrNone) {
  Scheduler s;
  s.UpsertAgent("a", 2, 0);
  s.UpsertAgent("b", 2, 0);
  EXPECT_EQ(s.TotalCapacity(false), 4);
  s.Enqueue(1, 0, 1, Cpu(3));
  auto d = s.Schedule();
  ASSERT_EQ(d.size(), 1u);
  ASSERT_TRUE(d[0].placed);
  ASSERT_EQ(d[0].placement.size(), 3u);
  EXPECT_EQ(d[0].placement[0].agent_id, "a");
  EXPECT_EQ(d[0].placement[1].agent_id, "a");
  EXPECT_EQ(d[0].placement[2].agent_id, "b");
  EXPECT_EQ(d[0].placement[2].rank, 2);
  EXPECT_EQ(s.FreeCapacity(false), 1);
  // Needs 2, one slot free: nothing is placed, the reason says why.
  s.Enqueue(2, 0, 2, Cpu(2));
  d = s.Schedule();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_FALSE(d[0].placed);
  EXPECT_EQ(d[0].wait_reason, "waiting for resources: needs 2 CPU slots; 1 free of 4 on 2 agent(s)");
  EXPECT_EQ(s.FreeCapacity(false), 1);
  s.Release(1);
  d = s.Schedule();
  ASSERT_TRUE(d[0].placed);
  EXPECT_EQ(s.queue_length(), 0);
}

TEST(Scheduler, PriorityThenArrivalAndHeadOfLineBlocking) {
  Scheduler s;
  s.UpsertAgent("a", 4, 0);
  s.Enqueue(10, 0, 10, Cpu(1));
  s.Enqueue(11, 5, 11, Cpu(4));  // higher priority, arrives later
  s.Enqueue(12, 5, 12, Cpu(1));
  auto d = s.Schedule();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].job_id, 11);
  EXPECT_TRUE(d[0].placed);
  EXPECT_EQ(d[1].job_id, 12);
  EXPECT_FALSE(d[1].placed);
  EXPECT_EQ(d[2].job_id, 10);
  s.Release(11);
  s.Enqueue(13, 9, 13, Cpu(4));
  s.UpsertAgent("a", 4, 0);
  // 13 (priority 9) takes everything; 12 and 10 wait behind nothing? No: 13
  // was placed, so they wait for resources.
  d = s.Schedule();
  EXPECT_EQ(d[0].job_id, 13);
  EXPECT_TRUE(d[0].placed);
  EXPECT_FALSE(d[1].placed);
  EXPECT_NE(d[1].wait_reason.find("waiting for resources"), std::string::npos);
  EXPECT_EQ(d[2].wait_reason, "queued behind job-12 (priority 5)");
}

TEST(Scheduler, LargerThanClusterIsSkippedNotBlocking) {
  Scheduler s;
  s.UpsertAgent("a", 2, 0);
  EXPECT_FALSE(s.FitsCluster(Cpu(3)));
  s.Enqueue(1, 9, 1, Cpu(3));
  s.Enqueue(2, 0, 2, Cpu(2));
  auto d = s.Schedule();
  EXPECT_FALSE(d[0].placed);
  EXPECT_NE(d[0].wait_reason.find("larger than the cluster"), std::string::npos);
  EXPECT_TRUE(d[1].placed);
  // A new agent makes room for it once job 2 is done.
  s.UpsertAgent("b", 2, 0);
  s.Release(2);
  d = s.Schedule();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].placed);
}

// A job whose ranks need more memory than the agents with free slots have:
// its ranks go only where they fit, and a job no agent can hold waits
// without blocking the queue behind it.
TEST(Scheduler, PerRankMemoryPlacesOnlyWhereItFitsAndNeverBlocks) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  Scheduler s;
  s.UpsertAgent("small", 4, 0, 2 * kGiB);
  s.UpsertAgent("big", 2, 0, 16 * kGiB);
  EXPECT_EQ(s.LargestAgentMemory(), 16 * kGiB);
  const Demand huge{1, false, 64 * kGiB};  // no agent holds one rank
  const Demand large{2, false, 8 * kGiB};  // only "big" does
  const Demand small{4, false, kGiB};
  EXPECT_FALSE(s.FitsCluster(huge));
  EXPECT_TRUE(s.FitsCluster(large));
  EXPECT_FALSE(s.FitsCluster(Demand{3, false, 8 * kGiB}));  // 6 slots, 2 of them on an agent that holds it
  EXPECT_EQ(s.TotalCapacity(large), 2);
  s.Enqueue(1, 10, 1, huge);   // highest priority: the head of the queue
  s.Enqueue(2, 5, 2, large);
  s.Enqueue(3, 0, 3, small);
  auto d = s.Schedule();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_FALSE(d[0].placed);
  EXPECT_EQ(d[0].wait_reason,
            "larger than the cluster: needs 1 CPU slots of 65536 MiB each; 0 free of 0 on 2 agent(s); waiting for capacity");
  ASSERT_TRUE(d[1].placed);
  for (const Slot& sl : d[1].placement) EXPECT_EQ(sl.agent_id, "big");
  ASSERT_TRUE(d[2].placed);
  for (const Slot& sl : d[2].placement) EXPECT_EQ(sl.agent_id, "small");
  EXPECT_EQ(s.queue_length(), 1);
  // Unknown memory on either side fits.
  s.UpsertAgent("unreported", 1, 0);
  EXPECT_TRUE(s.FitsCluster(huge));
  EXPECT_TRUE(s.FitsCluster(Demand{1, false, 0}));
}

TEST(Scheduler, GpuPlacementUsesDistinctDevices) {
  Scheduler s;
  s.UpsertAgent("a", 16, 2);
  s.UpsertAgent("b", 16, 2);
  auto p = s.PlaceNow(1, Demand{3, true});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ((*p)[0].gpu, 0);
  EXPECT_EQ((*p)[1].gpu, 1);
  EXPECT_EQ((*p)[2].agent_id, "b");
  EXPECT_EQ((*p)[2].gpu, 0);
  EXPECT_FALSE(s.PlaceNow(2, Demand{2, true}).has_value());
  EXPECT_EQ(s.FreeCapacity(true), 1);
  EXPECT_EQ(s.FreeCapacity(false), 32);  // GPU ranks take no CPU slots
}

Demand SharedGpu(int ranks, int per_gpu) { return Demand{ranks, true, 0, per_gpu}; }

TEST(Scheduler, RanksPerGpuPacksRanksOntoEachGpuInTurn) {
  Scheduler s;
  s.UpsertAgent("a", 16, 2);
  s.UpsertAgent("b", 16, 1);
  EXPECT_EQ(s.TotalCapacity(SharedGpu(1, 4)), 12);
  // 5 ranks, 2 per GPU: a's GPU 0 (ranks 0, 1), a's GPU 1 (2, 3), b's GPU 0 (4).
  auto p = s.PlaceNow(1, SharedGpu(5, 2));
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->size(), 5u);
  const std::vector<std::pair<std::string, int>> want = {{"a", 0}, {"a", 0}, {"a", 1}, {"a", 1}, {"b", 0}};
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ((*p)[r].rank, r);
    EXPECT_EQ((*p)[r].agent_id, want[r].first) << r;
    EXPECT_EQ((*p)[r].gpu, want[r].second) << r;
  }
  // b's GPU holds one rank of job 1 and is still not shared with another job.
  EXPECT_EQ(s.FreeCapacity(true), 0);
  EXPECT_FALSE(s.PlaceNow(2, SharedGpu(1, 2)).has_value());
  s.Release(1);
  EXPECT_EQ(s.FreeCapacity(true), 3);
  // Four ranks on one GPU of four: one GPU taken, three left for others.
  auto q = s.PlaceNow(3, SharedGpu(4, 4));
  ASSERT_TRUE(q.has_value());
  for (const Slot& sl : *q) {
    EXPECT_EQ(sl.agent_id, "a");
    EXPECT_EQ(sl.gpu, 0);
  }
  EXPECT_EQ(s.FreeCapacity(true), 2);
  // With ranks_per_gpu 1 the same job does not fit the two GPUs left.
  EXPECT_FALSE(s.PlaceNow(4, Demand{4, true}).has_value());
  EXPECT_TRUE(s.PlaceNow(4, SharedGpu(4, 2)).has_value());
}

TEST(Scheduler, SharedGpuShortageIsCountedInGpus) {
  Scheduler s;
  s.UpsertAgent("a", 4, 1);
  s.Enqueue(1, 0, 1, SharedGpu(2, 2));
  s.Enqueue(2, 0, 2, SharedGpu(4, 2));
  auto d = s.Schedule();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].placed);
  EXPECT_FALSE(d[1].placed);
  EXPECT_EQ(d[1].wait_reason,
            "larger than the cluster: needs 2 GPUs (4 ranks, 2 per GPU); 0 free of 1 on 1 agent(s); waiting for "
            "capacity");
}

TEST(Scheduler, AdoptTakesRanksSharingAGpu) {
  Scheduler s;
  s.UpsertAgent("a", 1, 2);
  ASSERT_TRUE(s.Adopt(5, "a", {{0, "", 1}, {1, "", 1}}, true));
  ASSERT_TRUE(s.Adopt(5, "a", {{2, "", 1}}, true));  // the job's own GPU, named again
  EXPECT_FALSE(s.Adopt(6, "a", {{0, "", 1}}, true));  // another job's GPU
  EXPECT_EQ(s.FreeCapacity(true), 1);
  ASSERT_EQ(s.Placement(5)->size(), 3u);
  EXPECT_EQ((*s.Placement(5))[2].gpu, 1);
}

TEST(Scheduler, RemoveAgentReleasesItsJobs) {
  Scheduler s;
  s.UpsertAgent("a", 1, 0);
  s.UpsertAgent("b", 1, 0);
  ASSERT_TRUE(s.PlaceNow(7, Cpu(2)).has_value());
  auto affected = s.RemoveAgent("b");
  ASSERT_EQ(affected, std::vector<int64_t>{7});
  EXPECT_EQ(s.Placement(7), nullptr);
  EXPECT_EQ(s.FreeCapacity(false), 1);
  EXPECT_TRUE(s.RemoveAgent("zzz").empty());
}

TEST(Scheduler, AdoptClaimsRunningRanks) {
  Scheduler s;
  s.UpsertAgent("a", 2, 0);
  s.UpsertAgent("b", 1, 2);
  ASSERT_TRUE(s.Adopt(5, "b", {{1, "", -1}}, false));
  ASSERT_TRUE(s.Adopt(5, "a", {{0, "", -1}}, false));
  const auto* p = s.Placement(5);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].agent_id, "a");
  EXPECT_EQ((*p)[1].agent_id, "b");
  EXPECT_EQ(s.FreeCapacity(false), 1);
  EXPECT_FALSE(s.Adopt(6, "b", {{0, "", -1}}, false));  // b has no free slot
  EXPECT_FALSE(s.Adopt(6, "zz", {{0, "", -1}}, false));
  ASSERT_TRUE(s.Adopt(7, "b", {{0, "", 1}}, true));
  EXPECT_FALSE(s.Adopt(8, "b", {{0, "", 1}}, true));  // GPU 1 taken
  EXPECT_EQ(s.FreeCapacity(true), 1);
  s.Release(5);
  EXPECT_EQ(s.FreeCapacity(false), 3);
}

}  // namespace
}  // namespace loom::runtime::service
