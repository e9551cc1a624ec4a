// `loom run` inside a Slurm allocation on the two-node test cluster: under
// srun (one task per node) and in an sbatch script, it reads Slurm's
// environment, runs one agent per node with the coordinator on the first,
// and trains exactly as `loom run` does on one machine: the same losses and
// the same final parameters, bitwise. A malformed allocation is an error that
// names the variable.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/slurm/slurm_cluster.h"
#include "tests/testing/loom_cli.h"
#include "tests/testing/processes.h"

namespace loom::testing {
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
  CliResult r = Shell(absl::StrCat("timeout 120 ", Loom(), " run ", spec, " --run-dir ", run));
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_GE(Losses(run).size(), 6u) << ReadFileBytes(run + "/metrics.jsonl");
}

void ExpectSameTraining(const std::string& local, const std::string& slurm) {
  EXPECT_EQ(Losses(slurm), Losses(local));
  const std::string a = ReadFileBytes(local + "/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadFileBytes(slurm + "/model.safetensors")) << "final parameters differ";
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
  CliResult r = cluster_->Run(absl::StrCat("srun --quiet -N2 --ntasks-per-node=1 --chdir=", ::testing::TempDir(),
                                           " --label ", Loom(), " run ", spec, " --run-dir ", run),
                              120);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("0: loom run: job-1 submitted (4 ranks on 2 nodes, 2 each; this is node 0, n1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1: loom run: node 1 (n2) joined"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0: loom run: job-1 SUCCEEDED"), std::string::npos) << r.output;
  ExpectSameTraining(Tmp("srun_local"), run);
}

TEST_F(SlurmRun, SbatchScriptRunsAcrossTheAllocation) {
  const std::string spec = Job("batch", "{dp: 2}");
  RunLocally(spec, Tmp("batch_local"));
  const std::string run = Tmp("batch_slurm"), out = Tmp("batch.out"), script = Tmp("job.sbatch");
  std::ofstream(script) << "#!/bin/bash\n#SBATCH -N2\n#SBATCH --ntasks-per-node=1\n"
                        << Loom() << " run " << spec << " --run-dir " << run << "\n";
  CliResult r = cluster_->Run(
      absl::StrCat("sbatch --wait --chdir=", ::testing::TempDir(), " --output=", out, " ", script), 120);
  const std::string log = ReadFileBytes(out);
  ASSERT_EQ(r.code, 0) << r.output << log;
  EXPECT_NE(log.find("running one loom run per node through srun"), std::string::npos) << log;
  EXPECT_NE(log.find("node 1 (n2) joined"), std::string::npos) << log;
  ExpectSameTraining(Tmp("batch_local"), run);
}

TEST_F(SlurmRun, SeveralTasksPerNodeIsRefused) {
  const std::string spec = Job("tasks", "{dp: 2}");
  CliResult r = cluster_->Run(absl::StrCat("srun --quiet -N2 --ntasks-per-node=2 --chdir=", ::testing::TempDir(), " ",
                                           Loom(), " run ", spec),
                              60);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("SLURM_NTASKS: loom run runs one task per node"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--ntasks-per-node=1"), std::string::npos) << r.output;
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
    CliResult r = Shell(absl::StrCat("env ", good, vars, " timeout 30 ", Loom(), " run ", spec));
    EXPECT_EQ(r.code, 2) << vars << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << vars << "\n" << r.output;
  }
}

}  // namespace
}  // namespace loom::testing
