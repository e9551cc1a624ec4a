// The Slurm backend's pure parts (gang shape, state mapping, scontrol
// parsing, error diagnosis) and its subprocess runner. The backend against a
// real Slurm is tests/slurm/backend_test.cc.
#include "runtime/service/slurm/slurm_placement.h"

#include <chrono>

#include "gtest/gtest.h"
#include "runtime/service/slurm/command.h"

namespace loom::runtime::service::slurm {
namespace {

TEST(SlurmGang, SplitsRanksEvenlyOverAsFewNodesAsFit) {
  auto g = [](int ranks, int per) {
    Gang x = GangFor(ranks, per);
    return std::make_pair(x.nodes, x.ranks_per_node);
  };
  EXPECT_EQ(g(1, 8), std::make_pair(1, 1));
  EXPECT_EQ(g(8, 8), std::make_pair(1, 8));
  EXPECT_EQ(g(16, 8), std::make_pair(2, 8));
  EXPECT_EQ(g(4, 1), std::make_pair(4, 1));
  EXPECT_EQ(g(2, 1), std::make_pair(2, 1));
  EXPECT_EQ(g(6, 4), std::make_pair(2, 3));  // 2 nodes of 4 would be uneven
  EXPECT_EQ(g(7, 4), std::make_pair(7, 1));  // a prime count spreads one per node
}

TEST(SlurmGang, CudaNodesAskForTheirRanksPackedRanksPerGpu) {
  v1::JobSpec spec;
  EXPECT_EQ(GpusPerNode(spec, Gang{2, 4}), 0);  // device: cpu
  spec.set_device("cuda");
  EXPECT_EQ(GpusPerNode(spec, Gang{2, 4}), 4);  // ranks_per_gpu unset: one each
  spec.mutable_resources()->set_ranks_per_gpu(2);
  EXPECT_EQ(GpusPerNode(spec, Gang{2, 4}), 2);
  spec.mutable_resources()->set_ranks_per_gpu(4);
  EXPECT_EQ(GpusPerNode(spec, Gang{1, 3}), 1);
  EXPECT_EQ(GpusPerNode(spec, Gang{1, 5}), 2);
}

TEST(SlurmStates, MapOntoLoomStates) {
  EXPECT_EQ(MapSlurmState("PENDING"), v1::PENDING);
  for (const char* s : {"CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED"})
    EXPECT_EQ(MapSlurmState(s), v1::RUNNING) << s;
  EXPECT_EQ(MapSlurmState("COMPLETED"), v1::SUCCEEDED);
  EXPECT_EQ(MapSlurmState("CANCELLED"), v1::CANCELLED);
  EXPECT_EQ(MapSlurmState("CANCELLED by 0"), v1::CANCELLED);
  EXPECT_EQ(MapSlurmState("CANCELLED+"), v1::CANCELLED);
  for (const char* s : {"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "BOOT_FAIL", "DEADLINE", "PREEMPTED"})
    EXPECT_EQ(MapSlurmState(s), v1::FAILED) << s;
  EXPECT_EQ(MapSlurmState("SOMETHING_NEW"), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(MapSlurmState(""), v1::JOB_STATE_UNSPECIFIED);
}

TEST(SlurmScontrol, ParsesOneLineRecords) {
  auto f = ParseScontrolLine(
      "JobId=42 JobName=loom.a.job-3 UserId=root(0) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
      "Requeue=0 Restarts=1 BatchFlag=1 ExitCode=2:0 NodeList=n[1-2]\n");
  EXPECT_EQ(f["JobId"], "42");
  EXPECT_EQ(f["JobState"], "FAILED");
  EXPECT_EQ(f["Reason"], "NonZeroExitCode");
  EXPECT_EQ(f["Restarts"], "1");
  EXPECT_EQ(f["ExitCode"], "2:0");
  EXPECT_EQ(f["NodeList"], "n[1-2]");
  EXPECT_TRUE(ParseScontrolLine("No jobs in the system").empty());
}

TEST(SlurmErrors, NameMungeAndTheController) {
  EXPECT_NE(DiagnoseSlurmError("sbatch: error: Munge encode failed: Failed to access \"/x/munge.sock\": No such file")
                .find("munge is not reachable"),
            std::string::npos);
  EXPECT_NE(DiagnoseSlurmError("squeue: error: Unable to contact slurm controller (connect failure)").find("slurmctld"),
            std::string::npos);
  EXPECT_EQ(DiagnoseSlurmError("sbatch: error: invalid partition specified: gpu"), "");
}

TEST(SlurmCommand, CapturesOutputAndExitCode) {
  auto r = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, std::chrono::seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  auto cwd = RunCommand({"pwd"}, std::chrono::seconds(10), "/tmp");
  ASSERT_TRUE(cwd.ok()) << cwd.status();
  EXPECT_EQ(cwd->out, "/tmp\n");
}

TEST(SlurmCommand, MissingProgramIsNotFoundNamingIt) {
  auto r = RunCommand({"loom-no-such-program-xyz"}, std::chrono::seconds(10));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("loom-no-such-program-xyz: not found on PATH"), std::string::npos);
}

TEST(SlurmCommand, TimeoutKillsTheCommandAndItsChildren) {
  const auto start = std::chrono::steady_clock::now();
  // The shell's child keeps the pipe open: the whole group must die.
  auto r = RunCommand({"sh", "-c", "sleep 30 & sleep 30"}, std::chrono::milliseconds(300));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("sh: no answer within 0.3 s"), std::string::npos) << r.status();
  EXPECT_LT(s, 5.0);
}

}  // namespace
}  // namespace loom::runtime::service::slurm
