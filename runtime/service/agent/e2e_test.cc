// Multi-process smoke test on loopback: the loom_coordinator daemon, two
// loom_agent processes with 2 CPU slots each (two "nodes"), and the CLI's
// `submit --watch` for a 4-rank (dp=2 x tp=2) job whose ranks are shell
// commands. Then SIGTERM everything: clean exits, no rank left.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/service/client_commands.h"
#include "runtime/service/testing/daemons.h"

namespace loom::runtime::service::agent {
namespace {

using loom::runtime::service::testing::Spawn;
using loom::runtime::service::testing::WaitExit;

TEST(EndToEnd, CoordinatorTwoAgentsAndCliSubmit) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string root = std::string(tmp ? tmp : "/tmp") + "/e2e";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  std::string data = root + "/coord", port_file = root + "/port";
  pid_t coord = Spawn({"runtime/service/loom_coordinator", "--data-dir", data, "--listen", "127.0.0.1:0",
                       "--metrics-listen", "off", "--port-file", port_file, "--heartbeat-ms", "200"},
                      root + "/coord.log");
  int port = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    if (in >> port) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(port, 0) << "coordinator did not start";
  std::string addr = "127.0.0.1:" + std::to_string(port);
  std::ofstream(root + "/worker.sh") << "echo rank $LOOM_RANK of $LOOM_WORLD_SIZE\n";
  std::vector<pid_t> agents;
  for (int n = 0; n < 2; ++n) {
    std::string node = "node" + std::to_string(n);
    agents.push_back(Spawn({"runtime/service/agent/loom_agent", "--coordinator", addr, "--token-dir", data,
                            "--data-dir", root + "/" + node, "--cpu-slots", "2", "--hostname", node, "--worker",
                            "/bin/sh " + root + "/worker.sh"},
                           root + "/" + node + ".log"));
  }
  std::ofstream(root + "/job.yaml") << "name: e2e\n"
                                       "model: {family: gpt, n_layer: 2, n_head: 4, d_model: 64, seq_len: 32}\n"
                                       "parallel: {dp: 2, tp: 2}\n";
  // Agents register asynchronously: wait_for_capacity lets the job queue
  // until both are there.
  std::ostringstream out, err;
  int rc = RunClientCommand("submit",
                            {root + "/job.yaml", "--coordinator", addr, "--data-dir", data, "--wait-for-capacity",
                             "--watch", "--json"},
                            out, err);
  EXPECT_EQ(rc, 0) << out.str() << err.str();
  EXPECT_NE(out.str().find("\"state\":\"SUCCEEDED\""), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("\"world_size\":4"), std::string::npos) << out.str();
  // Two ranks ran on each node (whichever registered first holds ranks 0-1).
  for (int rank = 0; rank < 4; ++rank) {
    std::string line;
    for (const char* node : {"node0", "node1"}) {
      std::ifstream log(root + "/" + node + "/logs/job-1/rank" + std::to_string(rank) + ".out");
      if (log) std::getline(log, line);
    }
    EXPECT_EQ(line, "rank " + std::to_string(rank) + " of 4");
  }
  int per_node = 0;
  for (const auto& e : std::filesystem::directory_iterator(root + "/node0/logs/job-1")) {
    per_node += e.path().extension() == ".out";
  }
  EXPECT_EQ(per_node, 2);
  // `loom logs` reads what the agents shipped to the coordinator.
  std::ostringstream logs, logs_err;
  rc = RunClientCommand("logs", {"job-1", "--rank", "2", "--coordinator", addr, "--data-dir", data}, logs, logs_err);
  EXPECT_EQ(rc, 0) << logs_err.str();
  EXPECT_EQ(logs.str(), "rank 2 of 4\n");

  for (pid_t a : agents) kill(a, SIGTERM);
  for (pid_t a : agents) {
    int st = WaitExit(a, 10);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  }
  kill(coord, SIGTERM);
  int st = WaitExit(coord, 10);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

}  // namespace
}  // namespace loom::runtime::service::agent
