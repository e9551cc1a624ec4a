// A node failure in a job submitted with --requeue: node n2's slurmd, its
// loom run and its worker are killed mid-run (after a checkpoint); Slurm marks
// the node down and requeues the job; the node comes back; the requeued run
// resumes from the last checkpoint, and its final parameters equal a
// fault-free run's, bitwise.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/slurm/slurm_cluster.h"
#include "tests/testing/loom_cli.h"
#include "tests/testing/processes.h"

namespace loom::tests::slurm {
namespace {

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/", name); }
std::string Loom() { return std::filesystem::absolute("runtime/loom").string(); }

std::string Job(const std::string& name, const std::string& ckpt) {
  std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: rq\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                         "train: {steps: 3000, log_every: 500, batch_size: 4, eval_every: 3000, eval_batches: 1, "
                         "sample_tokens: 0}\n"
                         "parallel: {dp: 2}\ncheckpoint: {every: 500, dir: "
                      << ckpt << "}\n";
  return path;
}

template <typename F>
bool WaitFor(F ready, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ready();
}

std::string Environ(pid_t pid) { return testing::ReadFileBytes(absl::StrCat("/proc/", pid, "/environ")); }

// Kills, as a node failure would, every process of node `name` whose
// environment holds `marker`, and the slurmstepd above each. The processes
// are found first and killed after, so a worker that dies with its parent is
// still counted. Returns the command names of those found.
std::string KillNodeProcesses(const std::string& marker, const std::string& name) {
  std::string found;
  std::vector<pid_t> victims;
  const std::string node_var = std::string(1, '\0') + "SLURMD_NODENAME=" + name + std::string(1, '\0');
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = std::string(1, '\0') + Environ(std::stoi(pid));
    if (env.find(marker) == std::string::npos || env.find(node_var) == std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string skip, comm;
    pid_t ppid = 0;
    stat >> skip >> comm >> skip >> ppid;
    if (testing::ReadFileBytes(absl::StrCat("/proc/", ppid, "/comm")).rfind("slurmstepd", 0) == 0)
      victims.push_back(ppid);
    victims.push_back(std::stoi(pid));
    const std::string cmd = testing::ReadFileBytes(e.path() / "cmdline");
    const size_t first = cmd.find('\0');
    found += cmd.substr(first + 1, cmd.find('\0', first + 1) - first - 1) + " ";
  }
  for (pid_t v : victims) kill(v, SIGKILL);
  return found;
}

// Whether any process of node `name` with `marker` in its environment is left.
bool NodeProcessesLeft(const std::string& marker, const std::string& name) {
  const std::string node_var = std::string(1, '\0') + "SLURMD_NODENAME=" + name + std::string(1, '\0');
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = std::string(1, '\0') + Environ(std::stoi(pid));
    if (env.find(marker) != std::string::npos && env.find(node_var) != std::string::npos) return true;
  }
  return false;
}

TEST(SlurmRequeue, NodeFailureResumesFromTheLastCheckpointBitwise) {
  auto cluster = SlurmCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  SlurmCluster& c = **cluster;
  const std::string ckpt = Tmp("ck"), run = Tmp("rq_run"), out = Tmp("rq.out"), script = Tmp("rq.sbatch");
  const std::string marker = absl::StrCat("LOOM_SLURM_TEST=", getpid(), "-requeue");
  std::ofstream(script) << "#!/bin/bash\n#SBATCH -N2\n#SBATCH --ntasks-per-node=1\nexport " << marker << "\n"
                        << Loom() << " run " << Job("rq", ckpt) << " --run-dir " << run << "\n";
  testing::CliResult sub = c.Run(
      absl::StrCat("sbatch --parsable --requeue --chdir=", ::testing::TempDir(), " --output=", out, " ", script), 30);
  ASSERT_EQ(sub.code, 0) << sub.output;
  const std::string job = sub.output.substr(0, sub.output.find_first_of(";\n"));

  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(ckpt + "/step_000000001000"); }, 90))
      << testing::ReadFileBytes(out);
  c.KillNode(1);
  const std::string killed = KillNodeProcesses(marker, "n2");
  EXPECT_NE(killed.find("run "), std::string::npos) << "n2's loom run: killed " << killed;
  EXPECT_NE(killed.find("worker "), std::string::npos) << "n2's worker: killed " << killed;
  EXPECT_TRUE(WaitFor([&] { return !NodeProcessesLeft(marker, "n2"); }, 5)) << "n2's processes outlived the kill";
  ASSERT_TRUE(WaitFor([&] { return c.NodeState(1).rfind("down", 0) == 0; }, 40)) << c.NodeState(1);
  c.RestartNode(1);

  std::string state;
  ASSERT_TRUE(WaitFor(
      [&] {
        state = c.Run("scontrol show job " + job, 10).output;
        return state.find("JobState=COMPLETED") != std::string::npos ||
               state.find("JobState=FAILED") != std::string::npos;
      },
      150))
      << state << testing::ReadFileBytes(out);
  const std::string log = testing::ReadFileBytes(out);
  ASSERT_NE(state.find("JobState=COMPLETED"), std::string::npos) << state << log;
  EXPECT_NE(state.find("Restarts=1"), std::string::npos) << state;
  // The requeued attempt resumed from the checkpoint rather than from step 0:
  // metrics.jsonl, appended across attempts by rank 0 (on whichever node it
  // lands), holds step 500 once (a restart from scratch logs it again) and
  // reaches step 3000. Rank 0's "resuming at step" line reaches the sbatch
  // output only when rank 0 lands on node 0, so it is not asserted.
  const std::string metrics = testing::ReadFileBytes(run + "/metrics.jsonl");
  size_t at500 = 0;
  for (size_t p = metrics.find("{\"step\": 500,"); p != std::string::npos; p = metrics.find("{\"step\": 500,", p + 1))
    ++at500;
  EXPECT_EQ(at500, 1u) << metrics << log;
  EXPECT_NE(metrics.find("{\"step\": 3000,"), std::string::npos) << metrics;

  const std::string ref = Tmp("rq_ref");
  testing::CliResult r =
      testing::Shell(absl::StrCat("timeout 120 ", Loom(), " run ", Job("ref", Tmp("ck_ref")), " --run-dir ", ref));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string want = testing::ReadFileBytes(ref + "/model.safetensors");
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(want == testing::ReadFileBytes(run + "/model.safetensors"))
      << "final parameters differ from a fault-free run";
}

}  // namespace
}  // namespace loom::tests::slurm
