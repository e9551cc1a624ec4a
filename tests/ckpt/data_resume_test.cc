// Exact resume over llm.c shards: `loom run` of a dp=2 job over three llm.c
// shards (data.order: sequential, 5 steps per shard), checkpoints every 3
// steps and max_restarts 1. Rank 1's worker is killed (kill -9) after the
// first checkpoint commits; the job restarts from its newest checkpoint,
// which lies before a shard boundary. Every loss the resumed attempt logs
// (metrics.jsonl keeps float losses exactly, %.9g) and the final parameters
// and AdamW state (the step-60 shard files) are bitwise equal to those of the
// same job run without a fault.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/data/testing/files.h"
#include "tests/testing/loom_cli.h"
#include "tests/testing/processes.h"

namespace {

namespace fs = std::filesystem;
using loom::tests::testing::FindLoomWorker;
using loom::tests::testing::ReadFileBytes;

constexpr int kSteps = 60, kBatch = 8, kWindows = 40, kSeq = 16;  // 40 windows a shard: 5 steps

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/dresume_", name); }

// Three training shards and one validation shard of a predictable id chain.
std::string WriteShards() {
  const std::string dir = Tmp("shards");
  fs::remove_all(dir);
  fs::create_directories(dir);
  uint32_t id = 1;
  for (const char* name : {"train_000.bin", "train_001.bin", "train_002.bin", "val_000.bin"}) {
    std::vector<uint32_t> ids(kWindows * kSeq + 1);
    for (auto& v : ids) v = id = (id * 37 + 11) % 251;
    loom::runtime::data::testing::Write(dir + "/" + name, loom::runtime::data::testing::Llmc(ids));
  }
  return dir;
}

std::string Job(const std::string& name, const std::string& shards, const std::string& ckpt) {
  const std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: " << kSeq
                      << ", vocab: 256}\n"
                      << "data: {path: '" << shards << "/train_*.bin', val: '" << shards
                      << "/val_*.bin', format: llmc, order: sequential}\n"
                      << "train: {steps: " << kSteps << ", batch_size: " << kBatch
                      << ", eval_every: 1000, eval_batches: 1, sample_tokens: 4, log_every: 1, lr: 3e-3}\n"
                      << "parallel: {dp: 2, tp: 1, backend: cpu:gloo}\n"
                      << "checkpoint: {every: 3, keep: 2, dir: " << ckpt << "}\n"
                      << "max_restarts: 1\nrun_dir: " << Tmp(name + "_run") << "\n";
  return path;
}

// step -> the loss exactly as metrics.jsonl holds it.
std::map<int, std::string> Losses(const std::string& run) {
  std::map<int, std::string> out;
  std::ifstream in(run + "/metrics.jsonl");
  const std::regex re("\\{\"step\": (\\d+), \"loss\": ([^,]+),");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, re)) out[std::stoi(m[1])] = m[2];
  return out;
}

TEST(DataResume, KilledRunResumesAcrossShardBoundariesBitwise) {
  const std::string shards = WriteShards(), ck_ref = Tmp("ck_ref"), ck_fault = Tmp("ck_fault");
  fs::remove_all(ck_ref);
  fs::remove_all(ck_fault);
  auto ref = loom::tests::testing::RunLoom("run " + Job("ref", shards, ck_ref), 240);
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_NE(ref.output.find("3 llmc shards"), std::string::npos) << ref.output;

  const std::string marker = loom::tests::testing::WorkerMarker("data_resume_fault");
  auto job = std::async(std::launch::async, [&] {
    return loom::tests::testing::RunLoom("run " + Job("fault", shards, ck_fault), 240, marker);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(ck_fault + "/latest") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(fs::exists(ck_fault + "/latest")) << "no checkpoint within 120 s";
  const pid_t victim = FindLoomWorker(marker, 1);
  ASSERT_GT(victim, 0) << "rank 1's worker not found";
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  auto fault = job.get();
  ASSERT_EQ(fault.code, 0) << fault.output;
  EXPECT_NE(fault.output.find("(restart 1)"), std::string::npos) << fault.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(fault.output, m, std::regex("resuming at step (\\d+)"))) << fault.output;
  const int resumed = std::stoi(m[1]);
  std::printf("killed after the first checkpoint; resumed at step %d of %d\n", resumed, kSteps);
  // The resumed attempt runs at least one whole shard (5 steps), so it
  // crosses a shard boundary: steps 5k and 5k + 1 read different shards.
  ASSERT_LE(resumed, kSteps - kWindows / kBatch) << "the kill landed too late to test a shard boundary";
  ASSERT_EQ((resumed - 1) % 3, 0) << "resumed after a step that is not a checkpoint step";

  const auto want = Losses(Tmp("ref_run")), got = Losses(Tmp("fault_run"));
  ASSERT_EQ(static_cast<int>(want.size()), kSteps);
  // metrics.jsonl is appended across attempts: the killed attempt's steps
  // stay, and the resumed attempt's steps follow them.
  EXPECT_EQ(got.begin()->first, 1) << "the killed attempt's metrics were lost";
  for (int s = resumed; s <= kSteps; ++s) {
    ASSERT_TRUE(got.count(s)) << "step " << s;
    EXPECT_EQ(got.at(s), want.at(s)) << "step " << s;
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::string f = absl::StrCat("/step_0000000000", kSteps, "/rank0000", rank, ".safetensors");
    const std::string a = ReadFileBytes(ck_ref + f), b = ReadFileBytes(ck_fault + f);
    EXPECT_FALSE(a.empty()) << f;
    EXPECT_TRUE(a == b) << f << " differs from the run without a fault";
  }
}

}  // namespace
