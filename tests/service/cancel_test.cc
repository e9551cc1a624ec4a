// `loom cancel` stops a job's workers promptly, end to end with the real
// `loom` binary: a coordinator (kill grace 10 s, its default), one `loom
// agent` (which blocks SIGTERM for its own sigwait) and a two-rank job that
// checkpoints every other step. After the cancel every worker process is gone
// within 3 s, far inside the grace, so none was left for the SIGKILL: each
// took the SIGTERM (its stderr says so) and rank 0, which commits the
// checkpoints, committed none after it took the signal.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::service::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Worker processes of `agent` (children of any of its threads, zombies too).
int Children(pid_t agent) {
  int n = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", agent, "/task"), ec)) {
    std::ifstream children(task.path() / "children");
    pid_t c;
    while (children >> c) ++n;
  }
  return n;
}

// The newest committed checkpoint step under `dir` (-1: none).
int64_t NewestStep(const std::string& dir) {
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0) newest = std::max<int64_t>(newest, std::stoll(n.substr(5)));
  }
  return newest;
}

TEST(Cancel, WorkersStopOnSigtermWithinTheGraceAndCommitNothingAfter) {
  const std::string root = std::filesystem::canonical(runtime::service::testing::TestDir("cancel")).string();
  const std::string data = root + "/coord";
  pid_t coord =
      runtime::service::testing::Spawn({"runtime/loom", "coordinator", "--data-dir", data, "--listen", "127.0.0.1:0",
                                        "--metrics-listen", "off", "--port-file", root + "/port", "--data-roots", root},
                                       root + "/coord.log");
  const int port = runtime::service::testing::ReadPort(root + "/port", 20);
  ASSERT_GT(port, 0) << ReadAll(root + "/coord.log");
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  pid_t agent =
      runtime::service::testing::Spawn({"runtime/loom", "agent", "--coordinator", addr, "--token-dir", data,
                                        "--data-dir", root + "/node", "--cpu-slots", "2", "--hostname", "node"},
                                       root + "/node.log");
  std::ofstream(root + "/job.yaml") << "name: cancelled\n"
                                       "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                                       "train: {steps: 100000, batch_size: 4, log_every: 50}\n"
                                       "parallel: {dp: 2, backend: 'cpu:gloo'}\n"
                                       "checkpoint: {every: 2, keep: 3, dir: "
                                    << root << "/ck}\nrun_dir: " << root << "/run\n";
  const std::string cli = absl::StrCat(" --coordinator ", addr, " --data-dir ", data);
  tests::testing::CliResult r = tests::testing::RunLoom("submit " + root + "/job.yaml --wait-for-capacity" + cli, 60);
  ASSERT_EQ(r.code, 0) << r.output;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (NewestStep(root + "/ck") < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(NewestStep(root + "/ck"), 4) << "no checkpoints yet\n" << ReadAll(root + "/node.log");
  ASSERT_EQ(Children(agent), 2);

  const auto t0 = std::chrono::steady_clock::now();
  r = tests::testing::RunLoom("cancel job-1" + cli, 30);
  ASSERT_EQ(r.code, 0) << r.output;
  while (Children(agent) > 0 && std::chrono::steady_clock::now() < t0 + std::chrono::seconds(12)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(Children(agent), 0);
  EXPECT_LT(secs, 3.0) << "workers outlived the cancel by " << secs << " s: they did not take the SIGTERM";
  std::printf("workers gone %.3f s after the cancel\n", secs);

  const std::string logs = root + "/node/logs/job-1/";
  const std::regex stopped("loom worker: SIGTERM: stopping; no checkpoint is committed after this line \\(last "
                           "committed by this process: step (-?[0-9]+)\\)");
  std::smatch m;
  const std::string err1 = ReadAll(logs + "rank1.err");
  EXPECT_TRUE(std::regex_search(err1, m, stopped)) << err1;
  const std::string err0 = ReadAll(logs + "rank0.err");
  ASSERT_TRUE(std::regex_search(err0, m, stopped)) << err0;
  const int64_t last = std::stoll(m[1].str());
  EXPECT_GE(last, 4);
  // A save past its check when the signal came finished before the line; one
  // that had not got there left at most a .tmp folder, never a step folder.
  EXPECT_EQ(NewestStep(root + "/ck"), last);

  kill(agent, SIGTERM);
  EXPECT_EQ(runtime::service::testing::WaitExit(agent, 10), 0);
  kill(coord, SIGTERM);
  EXPECT_EQ(runtime::service::testing::WaitExit(coord, 10), 0);
}

}  // namespace
}  // namespace loom::tests::service::testing
