// The Slurm test cluster itself: it comes up, runs a two-node step, and
// reports a down controller as an error rather than hanging.
#include <signal.h>

#include <gtest/gtest.h>

#include "tests/slurm/slurm_cluster.h"

namespace loom::tests::slurm {
namespace {

TEST(SlurmSmoke, SrunRunsOnBothNodes) {
  auto cluster = SlurmCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  testing::CliResult r = (*cluster)->Run("srun -N2 --ntasks-per-node=1 --label bash -c 'echo $SLURMD_NODENAME'", 30);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("0: n1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1: n2"), std::string::npos) << r.output;
  testing::CliResult h = (*cluster)->Run("srun --quiet -N2 hostname", 30);
  ASSERT_EQ(h.code, 0) << h.output;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(h.output, absl::StrCat(host, "\n", host, "\n"));
}

TEST(SlurmSmoke, StopLeavesNoDaemon) {
  auto cluster = SlurmCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = (*cluster)->dir();
  const std::vector<pid_t> pids = (*cluster)->daemon_pids();
  ASSERT_EQ(pids.size(), 4u);  // munged, slurmctld, two slurmd
  (*cluster)->Stop();
  for (pid_t p : pids) EXPECT_NE(kill(p, 0), 0) << "daemon " << p << " still running";
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace loom::tests::slurm
