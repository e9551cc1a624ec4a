// Worker death: `loom run` of a tp=2 x dp=2 job with
// checkpoint.every and max_restarts 1; kill -9 of rank 1's `loom worker`
// after the first checkpoint commits. The job restarts from that checkpoint,
// finishes with restart count 1, and its final checkpoint's shard files are
// bitwise equal to those of the same job run without a fault:
//   - on the CPU (deterministic at a fixed thread count);
//   - on one GPU shared by the 4 ranks (resources.ranks_per_gpu 4,
//     cuda:gloo, train.deterministic), killed at a random moment after the
//     first checkpoint (the delay's seed is printed). Survivors blocked in a
//     collective with the dead rank fail it and the group restarts. Skips
//     "needs a GPU" without one; on the GPU machine bench/cuda/run_checks.sh
//     runs it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"
#include "tests/testing/loom_cli.h"
#include "tests/testing/processes.h"

namespace {

namespace fs = std::filesystem;

using loom::tests::testing::CliResult;
using loom::tests::testing::RunLoom;

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/fault_", name); }

constexpr int kSteps = 120;
constexpr int kJobSeconds = 120;  // each `loom run`'s time limit

std::string Job(const std::string& name, const std::string& ckpt, bool cuda = false) {
  std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << (cuda ? "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 64, seq_len: 16}\n"
                               : "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n")
                      << "train: {steps: " << kSteps
                      << ", batch_size: 8, eval_every: 1000, eval_batches: 1, sample_tokens: 8, log_every: 20"
                      << (cuda ? ", deterministic: true}\n" : "}\n")
                      << (cuda ? "device: cuda\nresources: {ranks_per_gpu: 4}\n"
                               "parallel: {dp: 2, tp: 2, backend: \"cpu:gloo,cuda:gloo\"}\n"
                               : "parallel: {dp: 2, tp: 2, backend: cpu:gloo}\n")
                      << "checkpoint: {every: 10, keep: 2, dir: " << ckpt << "}\n"
                      << "max_restarts: 1\nrun_dir: " << Tmp(name + "_run") << "\n";
  return path;
}

using loom::tests::testing::FindLoomWorker;
using loom::tests::testing::ReadFileBytes;
using loom::tests::testing::WorkerMarker;

// Runs the job twice, the second time killing rank 1's worker `delay_ms`
// after its first checkpoint commits, and compares the final checkpoints.
void KillOneRankAndCompare(const std::string& tag, bool cuda, int delay_ms) {
  const std::string ck_ref = Tmp(tag + "ck_ref"), ck_fault = Tmp(tag + "ck_fault");
  fs::remove_all(ck_ref);
  fs::remove_all(ck_fault);
  CliResult ref = RunLoom("run " + Job(tag + "ref", ck_ref, cuda), kJobSeconds);
  ASSERT_EQ(ref.code, 0) << ref.output;

  const std::string marker = WorkerMarker(tag + "fault");
  auto job = std::async(std::launch::async,
                        [&] { return RunLoom("run " + Job(tag + "fault", ck_fault, cuda), kJobSeconds, marker); });
  // Wait for the first committed checkpoint, then kill -9 rank 1's worker.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(ck_fault + "/latest") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(fs::exists(ck_fault + "/latest")) << "no checkpoint within 60 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  pid_t victim = FindLoomWorker(marker, 1);
  ASSERT_GT(victim, 0) << "rank 1's worker not found";
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  CliResult fault = job.get();
  ASSERT_EQ(fault.code, 0) << fault.output;
  EXPECT_NE(fault.output.find("SUCCEEDED (restart 1)"), std::string::npos) << fault.output;
  EXPECT_NE(fault.output.find("resuming at step"), std::string::npos) << fault.output;

  const std::string last = absl::StrCat("/step_000000000", kSteps);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string f = absl::StrCat(last, "/rank0000", rank, ".safetensors");
    std::string a = ReadFileBytes(ck_ref + f), b = ReadFileBytes(ck_fault + f);
    EXPECT_FALSE(a.empty()) << f;
    EXPECT_TRUE(a == b) << f << " differs from the run without a fault";
  }
}

TEST(WorkerDeath, RestartsFromCheckpointAndEndsBitwiseEqual) { KillOneRankAndCompare("", false, 0); }

TEST(WorkerDeath, CudaRanksSharingTheGpuRestartAndEndBitwiseEqual) {
  const absl::Status avail = loom::kernels::cuda::CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << "needs a GPU: " << avail.message();
  const unsigned seed = std::random_device{}();
  const int delay_ms = static_cast<int>(std::mt19937(seed)() % 400);
  std::printf("kill rank 1 %d ms after the first checkpoint (seed %u)\n", delay_ms, seed);
  KillOneRankAndCompare("cuda_", true, delay_ms);
}

}  // namespace
