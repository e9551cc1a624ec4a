// Submissions across coordinator restarts:
// 200 `loom submit` calls from 4 client threads while the coordinator daemon is
// killed with SIGKILL and restarted several times on the same port. Clients
// retry UNAVAILABLE with the same idempotency key until acknowledged. Every
// submission must end acknowledged, and each job must exist exactly once.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/service/client_commands.h"
#include "runtime/service/testing/daemons.h"

namespace loom::tests::service {
namespace {

using loom::runtime::service::testing::ReadPort;
using loom::runtime::service::testing::StartCoordinator;

constexpr int kClients = 4;
constexpr int kPerClient = 50;
constexpr int kRestarts = 5;

void KillAndReap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST(SubmitAcrossRestarts, TwoHundredSubmissionsEachExistExactlyOnce) {
  const std::string root = loom::runtime::service::testing::TestDir("submit_restart");
  const std::string data = root + "/coord", port_file = root + "/port";
  pid_t coord = StartCoordinator(data, "127.0.0.1:0", port_file);
  const int port = ReadPort(port_file, 20);
  ASSERT_GT(port, 0) << "coordinator did not start";
  const std::string addr = absl::StrCat("127.0.0.1:", port);

  // One job spec per submission, so each job is recognisable by name.
  for (int i = 0; i < kClients * kPerClient; ++i)
    std::ofstream(absl::StrCat(root, "/job", i, ".yaml"))
        << "name: sub-" << i << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n";

  std::atomic<int> acknowledged{0}, done_clients{0};
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < kPerClient; ++k) {
        int i = c * kPerClient + k;
        std::ostringstream out, err;
        int rc = runtime::service::RunClientCommand(
            "submit",
            {absl::StrCat(root, "/job", i, ".yaml"), "--key", absl::StrCat("key-", i), "--wait-for-capacity",
             "--coordinator", addr, "--data-dir", data, "--timeout-s", "60", "--json"},
            out, err);
        if (rc == 0) {
          ++acknowledged;
        } else {
          failures[c] += absl::StrCat("job", i, ": rc ", rc, ": ", err.str(), "\n");
        }
      }
      ++done_clients;
    });
  }

  // Kill -9 and restart on the same port while the clients submit.
  int restarts = 0;
  for (; restarts < kRestarts && done_clients.load() < kClients; ++restarts) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 100 * restarts));
    KillAndReap(coord);
    coord = StartCoordinator(data, addr, port_file);
    ASSERT_EQ(ReadPort(port_file, 20), port) << "coordinator did not restart on " << addr;
  }
  for (auto& t : clients) t.join();
  std::printf("%d restarts during the submissions\n", restarts);
  EXPECT_GE(restarts, 2) << "the submissions finished before the coordinator was restarted twice";
  for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
  EXPECT_EQ(acknowledged.load(), kClients * kPerClient);

  // One final restart, then every job exactly once.
  KillAndReap(coord);
  coord = StartCoordinator(data, addr, port_file);
  ASSERT_EQ(ReadPort(port_file, 20), port);
  std::map<std::string, int> seen;
  {
    std::ostringstream out, err;
    int rc =
        runtime::service::RunClientCommand("jobs", {"--coordinator", addr, "--data-dir", data, "--json"}, out, err);
    ASSERT_EQ(rc, 0) << err.str();
    std::istringstream lines(out.str());
    std::string line;
    while (std::getline(lines, line))
      if (!line.empty()) seen[nlohmann::json::parse(line)["name"].get<std::string>()]++;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kClients * kPerClient));
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name << " exists " << n << " times";
  kill(coord, SIGTERM);
  waitpid(coord, nullptr, 0);
}

}  // namespace
}  // namespace loom::tests::service
