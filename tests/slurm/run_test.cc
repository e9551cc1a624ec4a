// `loom run` inside a Slurm allocation on the two-node test cluster: under
// srun (one task per node) and in an sbatch script, it reads Slurm's
// environment, runs one agent per node with the coordinator on the first,
// and trains exactly as `loom run` does on one machine: the same losses and
// the same final parameters, bitwise. A malformed allocation is an error that
// names the variable.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <fstream>
#include <string>
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

std::string Job(const std::string& name, const std::string& parallel) {
  std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                         "train: {steps: 6, log_every: 1, batch_size: 4, eval_every: 3, eval_batches: 1, sample_tokens: 0}\n"
                         "parallel: "
                      << parallel << "\n";
  return path;
}

// Every "loss" value of a run folder's metrics.jsonl, as printed (bitwise).
std::vector<std::string> Losses(const std::string& run) {
  std::vector<std::string> out;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("\"loss\": ");
    if (at == std::string::npos) continue;
    const size_t end = line.find_first_of(",}", at);
    out.push_back(line.substr(at, end - at));
  }
  return out;
}

// The single-machine run of `spec` that a Slurm run must equal.
void RunLocally(const std::string& spec, const std::string& run) {
  testing::CliResult r = testing::Shell(absl::StrCat("timeout 120 ", Loom(), " run ", spec, " --run-dir ", run));
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_GE(Losses(run).size(), 6u) << testing::ReadFileBytes(run + "/metrics.jsonl");
}

void ExpectSameTraining(const std::string& local, const std::string& slurm) {
  EXPECT_EQ(Losses(slurm), Losses(local));
  const std::string a = testing::ReadFileBytes(local + "/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == testing::ReadFileBytes(slurm + "/model.safetensors")) << "final parameters differ";
}

class SlurmRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = SlurmCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr) << "the Slurm test cluster did not start"; }
  static SlurmCluster* cluster_;
};
SlurmCluster* SlurmRun::cluster_ = nullptr;

TEST_F(SlurmRun, SrunTwoNodesMatchesOneMachineBitwise) {
  const std::string spec = Job("srun2d", "{dp: 2, tp: 2}");
  RunLocally(spec, Tmp("srun_local"));
  const std::string run = Tmp("srun_slurm");
  testing::CliResult r =
      cluster_->Run(absl::StrCat("srun --quiet -N2 --ntasks-per-node=1 --chdir=", ::testing::TempDir(), " --label ",
                                 Loom(), " run ", spec, " --run-dir ", run),
                    120);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("0: loom run: job-1 submitted (4 ranks on 2 nodes; coordinator at"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1: loom run: node 1 joined"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0: loom run: job-1 SUCCEEDED"), std::string::npos) << r.output;
  ExpectSameTraining(Tmp("srun_local"), run);
}

TEST_F(SlurmRun, SbatchScriptRunsAcrossTheAllocation) {
  const std::string spec = Job("batch", "{dp: 2}");
  RunLocally(spec, Tmp("batch_local"));
  const std::string run = Tmp("batch_slurm"), out = Tmp("batch.out"), script = Tmp("job.sbatch");
  std::ofstream(script) << "#!/bin/bash\n#SBATCH -N2\n#SBATCH --ntasks-per-node=1\n"
                        << Loom() << " run " << spec << " --run-dir " << run << "\n";
  testing::CliResult r =
      cluster_->Run(absl::StrCat("sbatch --wait --chdir=", ::testing::TempDir(), " --output=", out, " ", script), 120);
  const std::string log = testing::ReadFileBytes(out);
  ASSERT_EQ(r.code, 0) << r.output << log;
  EXPECT_NE(log.find("running one loom run per node through srun"), std::string::npos) << log;
  EXPECT_NE(log.find("node 1 joined"), std::string::npos) << log;
  ExpectSameTraining(Tmp("batch_local"), run);
}

// Processes (other than this test) whose environment holds `marker`.
int ProcessesWith(const std::string& marker) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || std::stoi(pid) == getpid()) continue;
    n += testing::ReadFileBytes(e.path() / "environ").find(marker) != std::string::npos;
  }
  return n;
}

// scancel mid-run: Slurm signals every node's loom run, node 0 cancels the
// job, and within KillWait (2 s) plus 1 s no Loom process is left on either
// node; Slurm reports the job CANCELLED.
TEST_F(SlurmRun, ScancelStopsEveryNodeWithinTheGrace) {
  const std::string spec = Job("long", "{dp: 4}");
  std::ofstream(spec, std::ios::app) << "max_restarts: 0\n";
  const std::string marker = absl::StrCat("LOOM_SLURM_TEST=", getpid(), "-scancel");
  const std::string out = Tmp("long.out"), script = Tmp("long.sbatch");
  std::ofstream(script) << "#!/bin/bash\n#SBATCH -N2\n#SBATCH --ntasks-per-node=1\nexport " << marker << "\n"
                        << Loom() << " run " << spec << " --steps 1000000 --run-dir " << Tmp("long_run") << "\n";
  testing::CliResult sub = cluster_->Run(
      absl::StrCat("sbatch --parsable --chdir=", ::testing::TempDir(), " --output=", out, " ", script), 30);
  ASSERT_EQ(sub.code, 0) << sub.output;
  const std::string job = sub.output.substr(0, sub.output.find_first_of(";\n"));
  // Training has started once rank 0 logs step 1 in the run folder (rank 0
  // may land on either node; only node 0's ranks print to the sbatch output).
  const std::string metrics = Tmp("long_run") + "/metrics.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (testing::ReadFileBytes(metrics).find("{\"step\": 1,") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(testing::ReadFileBytes(metrics).find("{\"step\": 1,"), std::string::npos) << testing::ReadFileBytes(out);
  const int running = ProcessesWith(marker);
  EXPECT_GE(running, 6) << "two loom run, four workers";  // plus srun and the batch shell
  ASSERT_EQ(cluster_->Run("scancel " + job, 10).code, 0);
  const auto cancelled = std::chrono::steady_clock::now();
  while (ProcessesWith(marker) > 0 && std::chrono::steady_clock::now() < cancelled + std::chrono::seconds(3))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ProcessesWith(marker), 0) << "Loom processes left 3 s after scancel";
  // COMPLETING while Slurm cleans up, then CANCELLED.
  testing::CliResult state;
  for (int i = 0; i < 100; ++i) {
    state = cluster_->Run("scontrol show job " + job, 10);
    if (state.output.find("JobState=COMPLETING") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(state.output.find("JobState=CANCELLED"), std::string::npos) << state.output;
}

// examples/slurm/gpt-2d.sbatch as a user submits it (from a copy of the
// examples in a shared folder, `loom` on PATH): tp=2 x dp=2 over both nodes,
// the same losses and parameters as `loom run examples/gpt-2d.yaml`.
TEST_F(SlurmRun, ExampleSbatchMatchesLoomRun) {
  const std::string root = Tmp("repo");
  std::filesystem::create_directories(root + "/examples/slurm");
  std::filesystem::copy_file("examples/gpt-2d.yaml", root + "/examples/gpt-2d.yaml");
  std::filesystem::copy_file("examples/slurm/gpt-2d.sbatch", root + "/examples/slurm/gpt-2d.sbatch");
  const std::string local = root + "/local", slurm = root + "/slurm", out = root + "/gpt-2d.out";
  testing::CliResult r = testing::Shell(
      absl::StrCat("cd ", root, " && timeout 120 ", Loom(), " run examples/gpt-2d.yaml --steps 4 --run-dir ", local));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string path = std::filesystem::path(Loom()).parent_path().string() + ":" + std::getenv("PATH");
  testing::CliResult b =
      cluster_->Run(absl::StrCat("env PATH=", path, " sbatch --wait --chdir=", root, " --output=", out,
                                 " examples/slurm/gpt-2d.sbatch --steps 4 --run-dir ", slurm),
                    150);
  const std::string log = testing::ReadFileBytes(out);
  ASSERT_EQ(b.code, 0) << b.output << log;
  EXPECT_NE(log.find("4 ranks on 2 nodes; coordinator at"), std::string::npos) << log;
  EXPECT_NE(log.find("node 1 joined"), std::string::npos) << log;
  ASSERT_FALSE(Losses(local).empty());
  ExpectSameTraining(local, slurm);
}

// SIGKILL to every process (other than this test) whose environment holds
// `marker`: srun, the batch shell, loom run and its workers.
void KillProcessesWith(const std::string& marker) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || std::stoi(pid) == getpid()) continue;
    if (testing::ReadFileBytes(e.path() / "environ").find(marker) != std::string::npos) kill(std::stoi(pid), SIGKILL);
  }
}

// The pid of a process of node `name` whose environment holds `marker` and
// whose command line is `loom <command> ...`; -1 if none.
pid_t FindNodeProcess(const std::string& marker, const std::string& name, const std::string& command) {
  const std::string node_var = std::string(1, '\0') + "SLURMD_NODENAME=" + name + std::string(1, '\0');
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmd = testing::ReadFileBytes(e.path() / "cmdline");
    if (cmd.find(std::string(1, '\0') + command + std::string(1, '\0')) == std::string::npos) continue;
    const std::string env = std::string(1, '\0') + testing::ReadFileBytes(e.path() / "environ");
    if (env.find(marker) != std::string::npos && env.find(node_var) != std::string::npos) return std::stoi(pid);
  }
  return -1;
}

// Node 0's loom run killed outright (srun keeps waiting for the other
// task): node 1 notices its coordinator is gone and stops, saying so, rather
// than waiting forever.
TEST_F(SlurmRun, LosingNodeZeroStopsTheOtherNode) {
  const std::string spec = Job("lost", "{dp: 2}");
  const std::string marker = absl::StrCat("LOOM_SLURM_TEST=", getpid(), "-lost");
  testing::CliResult r;
  std::thread srun([&] {
    r = cluster_->Run(absl::StrCat("env ", marker, " srun --quiet -N2 --ntasks-per-node=1 --chdir=",
                                   ::testing::TempDir(), " --label ", Loom(), " run ", spec,
                                   " --steps 1000000 --run-dir ", Tmp("lost_run")),
                      90);
  });
  // Whatever an assertion below does, the srun thread is joined: a failed
  // assertion kills the step's processes first, so the join is prompt.
  struct JoinSrun {
    std::thread& t;
    const std::string& marker;
    bool killed = false;
    void KillAndJoin() {
      if (!t.joinable()) return;
      if (!killed) KillProcessesWith(marker);
      t.join();
    }
    ~JoinSrun() { KillAndJoin(); }
  } guard{srun, marker};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && FindNodeProcess(marker, "n2", "worker") < 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const pid_t node0 = FindNodeProcess(marker, "n1", "run");
  EXPECT_GT(FindNodeProcess(marker, "n2", "worker"), 0) << "node 1's rank never started";
  ASSERT_GT(node0, 0);
  kill(node0, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  guard.killed = true;  // from here the test waits for srun to end by itself
  guard.KillAndJoin();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_NE(r.code, 124) << "srun still running after 90 s\n" << r.output;
  EXPECT_LT(took, 20.0) << r.output;
  EXPECT_NE(r.output.find("1: loom run: node 1: the coordinator at"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is gone"), std::string::npos) << r.output;
}

TEST_F(SlurmRun, SeveralTasksPerNodeIsRefused) {
  const std::string spec = Job("tasks", "{dp: 2}");
  testing::CliResult r = cluster_->Run(
      absl::StrCat("srun --quiet -N2 --ntasks-per-node=2 --chdir=", ::testing::TempDir(), " ", Loom(), " run ", spec),
      60);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("SLURM_NTASKS: loom run runs one task per node"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--ntasks-per-node=1"), std::string::npos) << r.output;
}

// examples/slurm/gpt-gpu.sbatch cannot run here (no GPU, and the test
// cluster has no GPU gres): its shell parses, and its #SBATCH directives,
// less --gpus-per-node, are accepted by `sbatch --test-only` (with
// --cpus-per-task=1 from the command line: the test nodes have 2 CPUs).
TEST_F(SlurmRun, GpuExampleParses) {
  const std::string script = "examples/slurm/gpt-gpu.sbatch";
  testing::CliResult syntax = testing::Shell("bash -n " + script);
  EXPECT_EQ(syntax.code, 0) << syntax.output;
  const std::string text = testing::ReadFileBytes(script);
  EXPECT_NE(text.find("\n#SBATCH --gpus-per-node=1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("loom run examples/gpt-cuda.yaml --nproc-per-node \"${SLURM_GPUS_ON_NODE"), std::string::npos)
      << text;
  const std::string copy = Tmp("gpt-gpu-nogres.sbatch");
  ASSERT_EQ(testing::Shell(absl::StrCat("sed '/--gpus-per-node/d' ", script, " > ", copy)).code, 0);
  testing::CliResult t = cluster_->Run(
      absl::StrCat("sbatch --test-only --cpus-per-task=1 --chdir=", ::testing::TempDir(), " ", copy), 30);
  EXPECT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("to start at"), std::string::npos) << t.output;
}

// A device: cuda job inside an allocation needs Slurm's GPUs for its ranks:
// none asked for, or fewer than its ranks per node, is exit 2 naming
// SLURM_GPUS_ON_NODE (before any GPU is looked for).
TEST(SlurmEnvironment, GpuJobNeedsSlurmGpus) {
  const std::string env = absl::StrCat("SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NNODES=1 SLURM_NTASKS=1 SLURM_NODEID=0 "
                                       "SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODELIST=n1 SLURM_SUBMIT_DIR=",
                                       ::testing::TempDir(), " ");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "SLURM_GPUS_ON_NODE: not set, but the job is device: cuda with 1 rank(s) per node"},
      {"SLURM_GPUS_ON_NODE=0 ", "SLURM_GPUS_ON_NODE: Slurm gave this node 0 GPU(s), but the job puts 1 rank(s)"},
  };
  for (const auto& [vars, want] : cases) {
    testing::CliResult r = testing::Shell(
        absl::StrCat("env ", env, vars, " timeout 30 ", Loom(), " run examples/gpt-cuda.yaml --steps 1"));
    EXPECT_EQ(r.code, 2) << vars << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << vars << "\n" << r.output;
  }
}

// Slurm's variables without Slurm: each malformed one exits 2 naming it.
TEST(SlurmEnvironment, MalformedVariablesAreNamed) {
  const std::string spec = Job("env", "{dp: 2}");
  const std::string good = absl::StrCat(
      "SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NNODES=2 SLURM_NTASKS=2 SLURM_NODEID=0 SLURM_PROCID=0 "
      "SLURM_LOCALID=0 SLURM_SUBMIT_DIR=",
      ::testing::TempDir(), " ");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"SLURM_NODELIST='n[1-2'", "SLURM_NODELIST: 'n[1-2': '[' without ']'"},
      {"SLURM_NODELIST='n[1-3]'", "names 3 nodes, but SLURM_NNODES is 2"},
      {"SLURM_NODELIST='n[1-2]' SLURM_NODEID=x", "SLURM_NODEID: expected an integer"},
  };
  for (const auto& [vars, want] : cases) {
    testing::CliResult r = testing::Shell(absl::StrCat("env ", good, vars, " timeout 30 ", Loom(), " run ", spec));
    EXPECT_EQ(r.code, 2) << vars << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << vars << "\n" << r.output;
  }
}

}  // namespace
}  // namespace loom::tests::slurm
