// A checkpoint folder after things went wrong, driving the shared training
// loop through each of its drivers in a child process each time: the worker's
// (RunParallelTraining over a world of one) and `loom train`'s
// (RunTrainCommand):
//   - the newest checkpoint is corrupt: the run resumes from the one before,
//     moves the corrupt folder aside and saves that step again (it used to
//     fail with "already exists" at that step, every attempt);
//   - a save runs out of space (RLIMIT_FSIZE): the run fails and leaves no
//     .tmp folder behind.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/process_group.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/launch/parallel_train.h"
#include "runtime/train/train_command.h"

namespace {

namespace fs = std::filesystem;

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/recovery_", name); }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

enum class Driver { kWorker, kLoomTrain };

// Runs `steps` steps of a tiny GPT with checkpoints every 3 steps into `ckpt`
// in a child process (stdout and stderr to `log`) through `driver`; returns
// its exit code. `file_limit` > 0: RLIMIT_FSIZE in the child.
int TrainInChild(Driver driver, const std::string& name, int steps, const std::string& ckpt, const std::string& log,
                 rlim_t file_limit = 0) {
  const std::string yaml = Tmp(name + ".yaml");
  std::ofstream(yaml) << "name: " << name
                      << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                      << "train: {steps: " << steps
                      << ", batch_size: 4, eval_every: 100, eval_batches: 1, sample_tokens: 4, log_every: 1}\n"
                      << "parallel: {backend: cpu:gloo}\n"
                      << "checkpoint: {every: 3, keep: 5, dir: " << ckpt << "}\n"
                      << "run_dir: " << Tmp("run_" + name) << "\n";
  pid_t pid = fork();
  if (pid == 0) {
    alarm(120);  // a stuck child dies
    if (freopen(log.c_str(), "w", stdout) == nullptr || dup2(fileno(stdout), 2) < 0) _exit(125);
    setvbuf(stdout, nullptr, _IONBF, 0);
    if (file_limit > 0) {
      signal(SIGXFSZ, SIG_IGN);
      struct rlimit lim = {file_limit, file_limit};
      setrlimit(RLIMIT_FSIZE, &lim);
    }
    if (driver == Driver::kLoomTrain) {
      int code = loom::runtime::train::RunTrainCommand({yaml});
      std::fflush(stdout);
      _exit(code);
    }
    auto spec = loom::runtime::jobspec::LoadJobSpec(yaml);
    if (!spec.ok()) _exit(124);
    loom::collectives::store::StoreServer::Options so;
    so.secret = "s";
    auto server = loom::collectives::store::StoreServer::Start(so);
    if (!server.ok()) _exit(123);
    auto store = loom::collectives::store::TcpStore::Connect((*server)->address(), "s");
    if (!store.ok()) _exit(122);
    auto pg = loom::collectives::ProcessGroup::Create(*store, 0, 1, {});
    if (!pg.ok()) _exit(121);
    int code = loom::runtime::launch::RunParallelTraining(
        *spec, std::shared_ptr<loom::collectives::ProcessGroup>(std::move(*pg)));
    std::fflush(stdout);
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x40;
  f.seekp(offset);
  f.write(&c, 1);
}

void CorruptNewestCheckpointIsMovedAsideAndSavedAgain(Driver d, const std::string& tag) {
  const std::string ck = Tmp("ck_corrupt" + tag);
  fs::remove_all(ck);
  const std::string first = Tmp("first" + tag + ".log");
  ASSERT_EQ(TrainInChild(d, "first" + tag, 6, ck, first), 0) << ReadAll(first);
  const std::string step6 = ck + "/step_000000000006";
  ASSERT_TRUE(fs::is_directory(step6));
  const std::string shard = step6 + "/rank00000.safetensors";
  FlipByte(shard, static_cast<std::streamoff>(fs::file_size(shard) / 2));
  ASSERT_FALSE(loom::runtime::checkpoint::OpenCheckpoint(step6).ok()) << "the flipped byte went unnoticed";

  const std::string log = Tmp("second" + tag + ".log");
  ASSERT_EQ(TrainInChild(d, "second" + tag, 9, ck, log), 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("unusable checkpoint moved aside: " + ck + "/corrupt.step_000000000006."),
            std::string::npos)
      << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("resuming at step 4"), std::string::npos) << ReadAll(log);
  auto latest = loom::runtime::checkpoint::LoadLatest(ck);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->ckpt.step, 9);
  EXPECT_TRUE(latest->skipped.empty());
  EXPECT_TRUE(loom::runtime::checkpoint::OpenCheckpoint(step6).ok()) << "step 6 was not saved again";
  int quarantined = 0;
  for (const auto& e : fs::directory_iterator(ck)) {
    quarantined += absl::StartsWith(e.path().filename().string(), "corrupt.step_000000000006.");
  }
  EXPECT_EQ(quarantined, 1);
}

void SaveThatRunsOutOfSpaceLeavesNoTemporaryFolder(Driver d, const std::string& tag) {
  const std::string ck = Tmp("ck_full_disk" + tag);
  fs::remove_all(ck);
  const std::string log = Tmp("full_disk" + tag + ".log");
  // The step-3 shard file (parameters and AdamW moments, ~250 kB) is larger
  // than the limit; the run's own files stay far below it.
  EXPECT_EQ(TrainInChild(d, "full-disk" + tag, 6, ck, log, 64 << 10), 1) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("checkpoint at step 3"), std::string::npos) << ReadAll(log);
  ASSERT_TRUE(fs::is_directory(ck));
  for (const auto& e : fs::directory_iterator(ck)) {
    EXPECT_FALSE(absl::StartsWith(e.path().filename().string(), ".tmp")) << e.path() << " left behind";
    EXPECT_FALSE(absl::StartsWith(e.path().filename().string(), "step_")) << e.path();
  }
}

TEST(Recovery, CorruptNewestCheckpointIsMovedAsideAndSavedAgain) {
  CorruptNewestCheckpointIsMovedAsideAndSavedAgain(Driver::kWorker, "");
}

TEST(Recovery, SaveThatRunsOutOfSpaceLeavesNoTemporaryFolder) {
  SaveThatRunsOutOfSpaceLeavesNoTemporaryFolder(Driver::kWorker, "");
}

TEST(Recovery, UnderLoomTrainCorruptNewestCheckpointIsMovedAsideAndSavedAgain) {
  CorruptNewestCheckpointIsMovedAsideAndSavedAgain(Driver::kLoomTrain, "_train");
}

TEST(Recovery, UnderLoomTrainSaveThatRunsOutOfSpaceLeavesNoTemporaryFolder) {
  SaveThatRunsOutOfSpaceLeavesNoTemporaryFolder(Driver::kLoomTrain, "_train");
}

}  // namespace
