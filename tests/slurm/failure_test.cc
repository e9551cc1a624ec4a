// What the Slurm backend says when Slurm is not usable: its client tools
// missing, munge stopped (its socket gone), slurmctld stopped. Each is an
// error naming what is wrong, within a time limit, never a hang: from a
// coordinator that starts (exit 1 at once) and from one already running
// (the job submitted meanwhile FAILS with the cause). A malformed
// SLURM_NODELIST is `loom run`'s case, in run_test (exit 2 naming it).
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/slurm/backend_fixture.h"
#include "tests/slurm/slurm_cluster.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::slurm {
namespace {

// `loom coordinator --backend slurm` that must refuse to start: its exit code
// and output, and how long it took.
struct Refusal {
  testing::CliResult r;
  double seconds = 0;
};
Refusal StartRefused(const std::string& data_dir, const std::string& env = "") {
  const auto start = Clock::now();
  Refusal f;
  f.r = testing::Shell(absl::StrCat("timeout 60 ", env, " ", Loom(), " coordinator --backend slurm --data-dir ",
                                    data_dir, " --listen 127.0.0.1:0 --metrics-listen off --slurm-timeout-ms 15000"));
  f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return f;
}

// A job submitted while Slurm is unusable fails, its root cause saying why.
std::string FailedCause(const Coordinator& c, const std::string& name) {
  const std::string job = c.Submit(Spec(name, 1, 3));
  EXPECT_FALSE(job.empty());
  const std::string st = c.AwaitStatus(job, 60, [](const std::string& s) { return JsonField(s, "state") == "FAILED"; });
  EXPECT_EQ(JsonField(st, "state"), "FAILED") << st;
  return JsonField(st, "root_cause");
}

TEST(SlurmBackendFailure, MissingClientToolsAreNamed) {
  Refusal f = StartRefused(Tmp("no-tools"), "env PATH=/nonexistent");
  EXPECT_EQ(f.r.code, 1) << f.r.output;
  EXPECT_NE(f.r.output.find("--backend slurm: sbatch: not found on PATH"), std::string::npos) << f.r.output;
  EXPECT_LT(f.seconds, 10.0);
}

TEST(SlurmBackendFailure, MungeStopped) {
  auto cluster = SlurmCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Coordinator c(Tmp("munge-coord"), {"--slurm-timeout-ms", "15000"});
  ASSERT_GT(c.port(), 0) << c.log();
  (*cluster)->StopMunge();
  ASSERT_FALSE(std::filesystem::exists((*cluster)->munge_socket()));
  const auto start = Clock::now();
  const std::string cause = FailedCause(c, "nomunge");
  EXPECT_NE(cause.find("sbatch failed"), std::string::npos) << cause;
  EXPECT_NE(cause.find("munge is not reachable"), std::string::npos) << cause;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 40.0);
  Refusal f = StartRefused(Tmp("munge-coord2"));
  EXPECT_EQ(f.r.code, 1) << f.r.output;
  EXPECT_NE(f.r.output.find("--backend slurm: cannot reach Slurm: squeue failed"), std::string::npos) << f.r.output;
  EXPECT_NE(f.r.output.find("munge is not reachable"), std::string::npos) << f.r.output;
  EXPECT_LT(f.seconds, 40.0);
}

TEST(SlurmBackendFailure, ControllerStopped) {
  auto cluster = SlurmCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Coordinator c(Tmp("ctld-coord"), {"--slurm-timeout-ms", "15000"});
  ASSERT_GT(c.port(), 0) << c.log();
  (*cluster)->StopController();
  const auto start = Clock::now();
  const std::string cause = FailedCause(c, "noctld");
  EXPECT_NE(cause.find("sbatch"), std::string::npos) << cause;
  EXPECT_NE(cause.find("the Slurm controller (slurmctld)"), std::string::npos) << cause;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 40.0);
  Refusal f = StartRefused(Tmp("ctld-coord2"));
  EXPECT_EQ(f.r.code, 1) << f.r.output;
  EXPECT_NE(f.r.output.find("--backend slurm: cannot reach Slurm"), std::string::npos) << f.r.output;
  EXPECT_NE(f.r.output.find("the Slurm controller (slurmctld)"), std::string::npos) << f.r.output;
  EXPECT_LT(f.seconds, 40.0);
}

}  // namespace
}  // namespace loom::tests::slurm
