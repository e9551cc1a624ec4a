// Coordinator death mid-job, end to end with the real `loom` binary: two
// agents run a 2D GPT job (tp=2 x dp=2); the coordinator is killed with
// SIGKILL and restarted on the same port and data folder. Two cases, each
// made deterministic by what the test waits for before the restart:
//   - the ranks are still training when the new coordinator comes up: the
//     agents see its new incarnation, register again and it adopts them;
//   - every rank finished while no coordinator was up: the agents keep the
//     exit reports and deliver them to the new coordinator.
// Either way the job ends SUCCEEDED with no group restart, its run folder
// reaches the final step, and the job list holds exactly one job. A third
// case pauses the coordinator instead: it must not take its own silence for
// its agents'.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::service::testing {
namespace {

class CoordinatorDeath : public ::testing::Test {
 protected:
  // Starts the coordinator and two agents, submits a job of `steps` steps and
  // waits until it reports a step.
  void StartJob(const std::string& name, int steps) {
    root_ = runtime::service::testing::TestDir(name);
    data_ = root_ + "/coord";
    port_file_ = root_ + "/port";
    coord_ = StartCoordinatorAt("127.0.0.1:0");
    const int port = runtime::service::testing::ReadPort(port_file_, 20);
    ASSERT_GT(port, 0) << "coordinator did not start";
    addr_ = absl::StrCat("127.0.0.1:", port);
    for (int n = 0; n < 2; ++n) {
      std::string node = absl::StrCat("node", n);
      agents_.push_back(
          runtime::service::testing::Spawn({"runtime/loom", "agent", "--coordinator", addr_, "--token-dir", data_,
                                            "--data-dir", root_ + "/" + node, "--cpu-slots", "2", "--hostname", node},
                                           root_ + "/" + node + ".log"));
    }
    std::ofstream(root_ + "/job.yaml") << "name: survive\n"
                                          "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                                          "train: {steps: "
                                       << steps
                                       << ", batch_size: 4, log_every: 50}\n"
                                          "parallel: {dp: 2, tp: 2}\nrun_dir: "
                                       << root_ << "/run\n";
    cli_ = absl::StrCat(" --coordinator ", addr_, " --data-dir ", data_);
    tests::testing::CliResult r = tests::testing::RunLoom(
        absl::StrCat("submit ", root_, "/job.yaml --key survive-1 --wait-for-capacity", cli_), 60);
    ASSERT_EQ(r.code, 0) << r.output;
    int64_t step = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (step <= 0 && std::chrono::steady_clock::now() < deadline) {
      r = tests::testing::RunLoom("status job-1 --json" + cli_, 10);
      if (r.code == 0) {
        auto j = nlohmann::json::parse(r.output, nullptr, false);
        if (j.is_object() && j.contains("current_step")) step = std::stoll(j["current_step"].get<std::string>());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_GT(step, 0) << "the job never reported a step: " << r.output;
  }

  // The grace is generous: four CPU-bound ranks share CI's two cores with
  // other tests, and the agents' reconnection must not race it.
  pid_t StartCoordinatorAt(const std::string& listen) {
    std::filesystem::remove(port_file_);
    return runtime::service::testing::Spawn(
        {"runtime/loom", "coordinator", "--data-dir", data_, "--listen", listen, "--metrics-listen", "off",
         "--port-file", port_file_, "--heartbeat-ms", "200", "--reclaim-grace-ms", "30000", "--data-roots", root_},
        root_ + "/coord.log");
  }

  void KillCoordinator() {
    ASSERT_EQ(kill(coord_, SIGKILL), 0);
    runtime::service::testing::WaitExit(coord_, 10);
  }

  void RestartCoordinator() {
    const int port = std::stoi(addr_.substr(addr_.rfind(':') + 1));
    coord_ = StartCoordinatorAt(addr_);
    ASSERT_EQ(runtime::service::testing::ReadPort(port_file_, 20), port) << "coordinator did not restart on " << addr_;
  }

  // The last line of the run's metrics.jsonl.
  std::string LastMetrics() const {
    std::ifstream metrics(root_ + "/run/metrics.jsonl");
    std::string line, last;
    while (std::getline(metrics, line)) last = line;
    return last;
  }

  // Worker processes the agents still have (children of any agent thread,
  // zombies not yet reaped included).
  int LiveWorkers() const {
    int n = 0;
    for (pid_t a : agents_) {
      std::error_code ec;
      for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", a, "/task"), ec)) {
        std::ifstream children(task.path() / "children");
        pid_t c;
        while (children >> c) ++n;
      }
    }
    return n;
  }

  void ExpectSucceededOnce(int steps) {
    tests::testing::CliResult r = tests::testing::RunLoom("status job-1 --watch --json" + cli_, 240);
    EXPECT_EQ(r.code, 0) << r.output << Logs();
    EXPECT_NE(r.output.find("\"state\":\"SUCCEEDED\""), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("\"restart_count\":"), std::string::npos) << "the group restarted:\n" << r.output;
    EXPECT_NE(r.output.find(absl::StrCat("\"current_step\":\"", steps, "\"")), std::string::npos)
        << "the final progress was lost:\n"
        << r.output;
    r = tests::testing::RunLoom("jobs --json" + cli_, 30);
    ASSERT_EQ(r.code, 0) << r.output;
    int jobs = 0;
    for (char c : r.output) jobs += c == '\n';
    EXPECT_EQ(jobs, 1) << r.output;
    EXPECT_NE(LastMetrics().find(absl::StrCat("\"step\": ", steps)), std::string::npos) << LastMetrics();
  }

  std::string Logs() const {
    std::string out;
    for (const char* f : {"/coord.log", "/node0.log", "/node1.log"}) {
      std::ifstream in(root_ + f);
      std::stringstream ss;
      ss << in.rdbuf();
      absl::StrAppend(&out, "\n---- ", f, "\n", ss.str());
    }
    return out;
  }

  void TearDown() override {
    for (pid_t a : agents_) kill(a, SIGTERM);
    for (pid_t a : agents_) runtime::service::testing::WaitExit(a, 10);
    if (coord_ > 0) {
      kill(coord_, SIGTERM);
      runtime::service::testing::WaitExit(coord_, 10);
    }
  }

  std::string root_, data_, port_file_, addr_, cli_;
  pid_t coord_ = -1;
  std::vector<pid_t> agents_;
};

TEST_F(CoordinatorDeath, RunningRanksAreAdoptedByTheRestartedCoordinator) {
  constexpr int kSteps = 1500;  // long enough to outlive the restart on any machine
  ASSERT_NO_FATAL_FAILURE(StartJob("coord_death_running", kSteps));
  ASSERT_NO_FATAL_FAILURE(KillCoordinator());
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  EXPECT_EQ(LiveWorkers(), 4) << "the job ended before the restart; this case needs it running\n" << LastMetrics();
  ExpectSucceededOnce(kSteps);
  std::ifstream log(root_ + "/coord.log");
  std::stringstream ss;
  ss << log.rdbuf();
  EXPECT_NE(ss.str().find("reclaimed 2 rank(s) of job-1"), std::string::npos) << Logs();
}

// A coordinator that stops answering for a while (paused here; in practice a
// slow disk under its store writes) has not heard its agents for many
// heartbeat intervals when it resumes. That silence is its own, not theirs:
// it keeps the agents and the job runs on.
TEST_F(CoordinatorDeath, PausedCoordinatorKeepsItsAgents) {
  constexpr int kSteps = 400;
  ASSERT_NO_FATAL_FAILURE(StartJob("coord_paused", kSteps));
  ASSERT_EQ(kill(coord_, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // 15 heartbeat intervals
  ASSERT_EQ(kill(coord_, SIGCONT), 0);
  ExpectSucceededOnce(kSteps);
  std::ifstream log(root_ + "/coord.log");
  std::stringstream ss;
  ss << log.rdbuf();
  EXPECT_EQ(ss.str().find(" lost: silent"), std::string::npos) << Logs();
}

TEST_F(CoordinatorDeath, JobThatFinishesWhileTheCoordinatorIsDownSucceeds) {
  constexpr int kSteps = 400;
  ASSERT_NO_FATAL_FAILURE(StartJob("coord_death_finished", kSteps));
  ASSERT_NO_FATAL_FAILURE(KillCoordinator());
  // Every rank exits with no coordinator to report to.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (LiveWorkers() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(LiveWorkers(), 0) << "the job did not finish while the coordinator was down";
  // The agents notice the exits (they reap every poll interval) before the restart.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  ExpectSucceededOnce(kSteps);
}

}  // namespace
}  // namespace loom::tests::service::testing
