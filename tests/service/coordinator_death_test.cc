// Coordinator death mid-job, end to end with the real `loom` binary: two
// agents run a 2D GPT job (tp=2 x dp=2); the coordinator is killed with
// SIGKILL while the job trains and restarted on the same port and data folder.
// The workers keep running, the agents reconnect, and the job completes:
// SUCCEEDED, no restart of the group, exactly one job in the list.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/service/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom::testing {
namespace {

TEST(CoordinatorDeath, RunningJobCompletesAfterKillAndRestart) {
  const std::string root = TestDir("coord_death");
  const std::string data = root + "/coord", port_file = root + "/port";
  // The reclaim grace (default 5 s) is long enough on an idle machine; here
  // four CPU-bound ranks share CI's two cores with other tests, and the
  // agents' reconnection was seen to take longer than 5 s.
  auto start = [&](const std::string& listen) {
    std::filesystem::remove(port_file);
    return Spawn({"runtime/loom", "coordinator", "--data-dir", data, "--listen", listen, "--metrics-listen", "off",
                  "--port-file", port_file, "--heartbeat-ms", "200", "--reclaim-grace-ms", "30000"},
                 root + "/coord.log");
  };
  pid_t coord = start("127.0.0.1:0");
  const int port = ReadPort(port_file, 20);
  ASSERT_GT(port, 0) << "coordinator did not start";
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  std::vector<pid_t> agents;
  for (int n = 0; n < 2; ++n) {
    std::string node = absl::StrCat("node", n);
    agents.push_back(Spawn({"runtime/loom", "agent", "--coordinator", addr, "--token-dir", data, "--data-dir",
                            root + "/" + node, "--cpu-slots", "2", "--hostname", node},
                           root + "/" + node + ".log"));
  }
  std::ofstream(root + "/job.yaml") << "name: survive\n"
                                       "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                                       "train: {steps: 400, batch_size: 4, log_every: 50}\n"
                                       "parallel: {dp: 2, tp: 2}\nrun_dir: "
                                    << root << "/run\n";
  const std::string cli = absl::StrCat(" --coordinator ", addr, " --data-dir ", data);
  CliResult r = RunLoom(absl::StrCat("submit ", root, "/job.yaml --key survive-1 --wait-for-capacity", cli), 60);
  ASSERT_EQ(r.code, 0) << r.output;
  // Wait until the job trains (step > 0 reported), then kill the coordinator.
  int64_t step = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (step <= 0 && std::chrono::steady_clock::now() < deadline) {
    r = RunLoom("status job-1 --json" + cli, 10);
    if (r.code == 0) {
      auto j = nlohmann::json::parse(r.output, nullptr, false);
      if (j.is_object() && j.contains("current_step")) step = std::stoll(j["current_step"].get<std::string>());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(step, 0) << "the job never reported a step: " << r.output;
  ASSERT_EQ(kill(coord, SIGKILL), 0);
  WaitExit(coord, 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  coord = start(addr);
  ASSERT_EQ(ReadPort(port_file, 20), port) << "coordinator did not restart on " << addr;

  r = RunLoom("status job-1 --watch --json" + cli, 240);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"state\":\"SUCCEEDED\""), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\"restart_count\":"), std::string::npos) << "the group restarted:\n" << r.output;
  r = RunLoom("jobs --json" + cli, 30);
  ASSERT_EQ(r.code, 0) << r.output;
  int jobs = 0;
  for (char c : r.output) jobs += c == '\n';
  EXPECT_EQ(jobs, 1) << r.output;
  std::ifstream metrics(root + "/run/metrics.jsonl");
  std::string line, last;
  while (std::getline(metrics, line)) last = line;
  EXPECT_NE(last.find("\"step\": 400"), std::string::npos) << last;

  for (pid_t a : agents) kill(a, SIGTERM);
  for (pid_t a : agents) WaitExit(a, 10);
  kill(coord, SIGTERM);
  WaitExit(coord, 10);
}

}  // namespace
}  // namespace loom::testing
