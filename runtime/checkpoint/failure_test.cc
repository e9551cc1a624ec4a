// Failure behaviour: a saver killed at random points, corrupted or truncated
// shards, injected write errors, and a real write limit (RLIMIT_FSIZE).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "absl/strings/match.h"
#include "base/testing/full_sweep.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/test_util.h"

namespace loom::runtime::checkpoint {
namespace {

using testing::BitwiseEqual;
using testing::FreshDir;
using testing::Pattern;
using testing::SampleRequest;

const char* kStep1 = "step_000000000001";
const char* kStep2 = "step_000000000002";

std::string TwoCheckpoints(const std::string& name) {
  std::string root = FreshDir(name);
  EXPECT_TRUE(SaveCheckpoint(root, SampleRequest(1)).ok());
  EXPECT_TRUE(SaveCheckpoint(root, SampleRequest(2)).ok());
  return root;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.read(&c, 1);
  c ^= 0x20;
  f.seekp(offset);
  f.write(&c, 1);
}

// Loads the newest checkpoint, expecting a fallback to step 1 whose reason names `file` and `why`.
void ExpectFallback(const std::string& root, const std::string& file, const std::string& why) {
  auto r = LoadLatest(root);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ckpt.step, 1);
  ASSERT_EQ(r->skipped.size(), 1u);
  EXPECT_TRUE(absl::StrContains(r->skipped[0], kStep2)) << r->skipped[0];
  EXPECT_TRUE(absl::StrContains(r->skipped[0], file)) << r->skipped[0];
  EXPECT_TRUE(absl::StrContains(r->skipped[0], why)) << r->skipped[0];
  EXPECT_TRUE(absl::StrContains(r->Explain(), "an older checkpoint")) << r->Explain();
  auto w = CheckpointReader::Open(r->ckpt)->ReadFull("w");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(BitwiseEqual(*w, Pattern({7, 10}, DType::kF32, 1)));
}

TEST(Corruption, FlippedDataByteIsDetected) {
  std::string root = TwoCheckpoints("flip");
  auto info = OpenCheckpoint(root + "/" + kStep2);
  ASSERT_TRUE(info.ok());
  const ShardRecord& s = info->manifest.Find("w")->shards[2];
  FlipByte(root + "/" + kStep2 + "/" + s.file, (s.byte_begin + s.byte_end) / 2);
  ExpectFallback(root, s.file, "checksum mismatch");
}

TEST(Corruption, FlippedHeaderByteIsDetected) {
  std::string root = TwoCheckpoints("fliphdr");
  FlipByte(root + "/" + kStep2 + "/rank00003.safetensors", 12);  // inside the JSON header
  ExpectFallback(root, "rank00003.safetensors", "");
}

TEST(Corruption, TruncatedShardIsDetected) {
  std::string root = TwoCheckpoints("trunc");
  std::string path = root + "/" + kStep2 + "/rank00001.safetensors";
  auto size = ReadSmallFile(path, 1 << 20);
  ASSERT_TRUE(size.ok());
  ASSERT_EQ(truncate(path.c_str(), size->size() - 3), 0);
  ExpectFallback(root, "rank00001.safetensors", "out of range");
}

TEST(Corruption, MissingShardFileOrManifest) {
  std::string root = TwoCheckpoints("missing");
  ASSERT_EQ(unlink((root + "/" + kStep2 + "/rank00000.safetensors").c_str()), 0);
  ExpectFallback(root, "rank00000.safetensors", "No such file");
  root = TwoCheckpoints("nomanifest");
  ASSERT_EQ(unlink((root + "/" + kStep2 + "/manifest.json").c_str()), 0);
  ExpectFallback(root, "manifest.json", "No such file");
  root = TwoCheckpoints("badmanifest");
  ASSERT_EQ(truncate((root + "/" + kStep2 + "/manifest.json").c_str(), 100), 0);
  ExpectFallback(root, "manifest.json", "malformed JSON");
}

TEST(Corruption, NothingUsable) {
  std::string root = FreshDir("none");
  EXPECT_EQ(LoadLatest(root).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(SaveCheckpoint(root, SampleRequest(1)).ok());
  ASSERT_EQ(unlink((root + "/" + kStep1 + "/rank00002.safetensors").c_str()), 0);
  auto r = LoadLatest(root);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "rank00002.safetensors")) << r.status();
}

// PrepareResume moves every committed folder newer than the newest usable one
// aside (so its step can be saved again), and every one when none is usable.
TEST(Corruption, PrepareResumeMovesUnusableFoldersAside) {
  std::string root = TwoCheckpoints("prepare");
  ASSERT_EQ(unlink((root + "/" + kStep2 + "/rank00001.safetensors").c_str()), 0);
  auto p = PrepareResume(root);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->latest.has_value());
  EXPECT_EQ(p->latest->ckpt.step, 1);
  ASSERT_EQ(p->quarantined.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(p->quarantined[0], root + "/corrupt." + kStep2 + ".")) << p->quarantined[0];
  EXPECT_TRUE(PathExists(p->quarantined[0] + "/manifest.json"));  // kept, not deleted
  EXPECT_FALSE(PathExists(root + "/" + kStep2));
  EXPECT_TRUE(SaveCheckpoint(root, SampleRequest(2)).ok());  // the step saves again
  EXPECT_EQ(LoadLatest(root)->ckpt.step, 2);
  // Nothing usable: every committed folder goes; a fresh start can save them all.
  ASSERT_EQ(unlink((root + "/" + kStep1 + "/manifest.json").c_str()), 0);
  ASSERT_EQ(unlink((root + "/" + kStep2 + "/manifest.json").c_str()), 0);
  p = PrepareResume(root);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->latest.has_value());
  EXPECT_EQ(p->quarantined.size(), 2u);
  EXPECT_TRUE(ListCheckpoints(root)->empty());
  // An empty root: nothing to do.
  p = PrepareResume(FreshDir("prepare_empty"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->latest.has_value());
  EXPECT_TRUE(p->quarantined.empty());
}

// Injected failures at each stage of a save: the save fails, and the previous checkpoint still loads.
TEST(WriteFailure, InjectedErrorsFailCleanly) {
  struct Case {
    const char* op;
    const char* path_part;
    bool committed;  // the failure comes after the commit point
  } cases[] = {
      {"write", "rank00002", false}, {"open", "rank00001", false},    {"fsync", "rank00003", false},
      {"write", "manifest", false},  {"fsync", "manifest", false},    {"rename", kStep2, false},
      {"rename", "/latest", true},
  };
  for (const Case& c : cases) {
    std::string root = FreshDir("inject");
    ASSERT_TRUE(SaveCheckpoint(root, SampleRequest(1)).ok());
    SetIoFaultHookForTesting([&](absl::string_view op, const std::string& path) {
      if (op == c.op && absl::StrContains(path, c.path_part)) return absl::DataLossError("No space left on device");
      return absl::OkStatus();
    });
    absl::Status s = SaveCheckpoint(root, SampleRequest(2));
    SetIoFaultHookForTesting(nullptr);
    ASSERT_FALSE(s.ok()) << c.op << " " << c.path_part;
    EXPECT_TRUE(absl::StrContains(s.message(), "injected")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.path_part)) << s;
    // "latest" names a complete checkpoint; no temporary folder is left behind.
    auto latest = ReadLatestPointer(root);
    ASSERT_TRUE(latest.ok());
    EXPECT_EQ(*latest, kStep1);
    EXPECT_TRUE(OpenCheckpoint(root + "/" + *latest).ok());
    auto names = ListDir(root);
    ASSERT_TRUE(names.ok());
    for (const std::string& n : *names) EXPECT_FALSE(absl::StartsWith(n, ".tmp")) << n;
    auto r = LoadLatest(root);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ckpt.step, c.committed ? 2 : 1) << c.op << " " << c.path_part;
    EXPECT_TRUE(r->skipped.empty());
  }
}

// A real write failure: the child process may not grow files past 3000 bytes (EFBIG).
TEST(WriteFailure, FileSizeLimitFailsCleanly) {
  std::string root = FreshDir("fsize");
  ASSERT_TRUE(SaveCheckpoint(root, SampleRequest(1)).ok());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // internal deadline: a stuck child dies
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {3000, 3000};
    setrlimit(RLIMIT_FSIZE, &lim);
    SaveRequest big = SampleRequest(2);
    big.tensors.push_back(testing::GridShards("big", Pattern({40, 40}, DType::kF32, 0), {1, 1}));
    absl::Status s = SaveCheckpoint(root, big);
    bool clean = !s.ok() && absl::StrContains(s.message(), "rank00000.safetensors") &&
                 absl::StrContains(s.message(), "too large");
    if (!clean) fprintf(stderr, "child: %s\n", s.ToString().c_str());
    _exit(clean ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto r = LoadLatest(root);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ckpt.step, 1);
  EXPECT_EQ(*ReadLatestPointer(root), kStep1);
}

// A child saves checkpoints in a loop and is SIGKILLed at a random moment, many
// times. Each time, "latest" names a complete checkpoint and the loader resumes
// from a complete one that is never older than the previous resume point.
TEST(Crash, KilledSaverAlwaysLeavesACompleteCheckpoint) {
  const int kills = loom::testing::FullSweep() ? 50 : 10;
  std::string root = FreshDir("crash");
  std::mt19937 rng(1234);
  // Kill points spread over about four saves (a save's time is measured first).
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(SaveCheckpoint(FreshDir("crash_timing"), SampleRequest(1)).ok());
  const int64_t save_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  const int64_t window_us = std::min<int64_t>(4 * save_us + 3000, 1000000);
  int64_t resumed = 0;
  int committed_runs = 0, interrupted = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  for (int k = 0; k < kills; ++k) {
    if (std::chrono::steady_clock::now() > deadline) {  // internal deadline: stop early on a slow machine
      fprintf(stderr, "crash test: deadline reached after %d kills\n", k);
      ASSERT_GE(k, 3);
      break;
    }
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (!CleanStale(root).ok()) _exit(2);
      auto last = LoadLatest(root);
      int64_t step = last.ok() ? last->ckpt.step : 0;
      for (int i = 0; i < 100000; ++i) {
        if (!SaveCheckpoint(root, SampleRequest(++step), {3}).ok()) _exit(3);
      }
      _exit(0);
    }
    if (k == 0) {
      // The first child is let to commit once, so that later kills always have a checkpoint to keep.
      while (ReadLatestPointer(root).value_or("").empty() && std::chrono::steady_clock::now() < deadline) {
        usleep(1000);
      }
    }
    usleep(static_cast<useconds_t>(rng() % window_us));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
    // Count kills that interrupted a save (a temporary folder was left).
    auto names = ListDir(root);
    ASSERT_TRUE(names.ok());
    for (const std::string& n : *names) {
      if (absl::StartsWith(n, ".tmp.step_")) {
        ++interrupted;
        break;
      }
    }
    // "latest" never names a partial checkpoint.
    auto latest = ReadLatestPointer(root);
    ASSERT_TRUE(latest.ok());
    if (!latest->empty()) {
      auto info = OpenCheckpoint(root + "/" + *latest, Verify::kFull);
      ASSERT_TRUE(info.ok()) << "latest -> " << *latest << ": " << info.status();
    }
    auto r = LoadLatest(root);
    if (!r.ok()) {
      ASSERT_EQ(resumed, 0) << r.status();  // only before the first commit
      continue;
    }
    ++committed_runs;
    EXPECT_TRUE(r->skipped.empty()) << r->Explain();
    EXPECT_GE(r->ckpt.step, resumed);
    resumed = r->ckpt.step;
    auto w = CheckpointReader::Open(r->ckpt)->ReadFull("w");
    ASSERT_TRUE(w.ok());
    EXPECT_TRUE(BitwiseEqual(*w, Pattern({7, 10}, DType::kF32, static_cast<int>(resumed))));
  }
  EXPECT_GT(committed_runs, 0);
  fprintf(stderr,
          "crash test: %d kills over a %lld us window (one save: %lld us), %d left a partial save, %d resumes, "
          "last at step %lld\n",
          kills, static_cast<long long>(window_us), static_cast<long long>(save_us), interrupted, committed_runs,
          static_cast<long long>(resumed));
  EXPECT_GT(interrupted, 0);
}

}  // namespace
}  // namespace loom::runtime::checkpoint
