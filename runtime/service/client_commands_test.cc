#include "runtime/service/client_commands.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "gtest/gtest.h"
#include "runtime/service/server.h"

namespace loom::runtime::service {
namespace {

class ClientCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = std::string(tmp ? tmp : "/tmp") + "/cli";
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
    unsetenv("LOOM_TOKEN");
    ServerOptions o;
    o.coordinator.data_dir = root_ + "/data";
    auto s = CoordinatorServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    std::ofstream(root_ + "/job.yaml") << "name: cli\n"
                                          "model: {family: gpt, n_layer: 2, n_head: 4, d_model: 64, seq_len: 32}\n"
                                          "parallel: {dp: 2}\n";
    std::ofstream(root_ + "/bad.yaml") << "name: bad\nmodel: {n_head: four}\n";
  }

  // Runs `loom <cmd> args... --coordinator ... --data-dir ...`.
  int Run(const std::string& cmd, std::vector<std::string> args, bool connect = true) {
    if (connect) {
      args.push_back("--coordinator=127.0.0.1:" + std::to_string(server_->port()));
      args.push_back("--data-dir=" + root_ + "/data");
    }
    out_.str("");
    err_.str("");
    return RunClientCommand(cmd, args, out_, err_);
  }

  int Lines() {
    std::string s = out_.str();
    return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
  }

  std::string root_;
  std::unique_ptr<CoordinatorServer> server_;
  std::ostringstream out_, err_;
};

TEST_F(ClientCommandsTest, SubmitIsIdempotentAndValidatesLocally) {
  std::string yaml = root_ + "/job.yaml";
  ASSERT_EQ(Run("submit", {yaml, "--key", "k1", "--wait-for-capacity"}), 0) << err_.str();
  EXPECT_EQ(out_.str().rfind("job-1  PENDING  name=cli  ranks=2", 0), 0u) << out_.str();
  ASSERT_EQ(Run("submit", {yaml, "--key=k1", "--wait-for-capacity"}), 0) << err_.str();
  EXPECT_EQ(out_.str().rfind("job-1  PENDING", 0), 0u) << out_.str();
  // Larger than the (empty) cluster without --wait-for-capacity.
  EXPECT_EQ(Run("submit", {yaml, "--key=k2"}), 2);
  EXPECT_NE(err_.str().find("FAILED_PRECONDITION"), std::string::npos) << err_.str();
  EXPECT_EQ(Run("submit", {root_ + "/bad.yaml"}), 2);
  EXPECT_NE(err_.str().find("model.n_head"), std::string::npos) << err_.str();
  EXPECT_EQ(Run("submit", {}), 2);
  ASSERT_EQ(Run("jobs", {"--json"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("\"job_id\":\"job-1\""), std::string::npos) << out_.str();
  EXPECT_EQ(Lines(), 1);
}

// The old parser rejected "pending" (JobState_Parse is case-sensitive) and
// passed unknown flags through silently.
TEST_F(ClientCommandsTest, StateNamesAnyCaseAndUnknownFlagsRefused) {
  std::string yaml = root_ + "/job.yaml";
  ASSERT_EQ(Run("submit", {yaml, "--wait-for-capacity"}), 0) << err_.str();
  for (const char* state : {"pending", "Pending", "PENDING"}) {
    ASSERT_EQ(Run("jobs", {"--state", state}), 0) << state << ": " << err_.str();
    EXPECT_EQ(out_.str().rfind("job-1\tPENDING\tcli", 0), 0u) << state << ": " << out_.str();
  }
  ASSERT_EQ(Run("jobs", {"--state=running", "--state", "Succeeded"}), 0) << err_.str();
  EXPECT_EQ(Lines(), 0) << out_.str();
  EXPECT_EQ(Run("jobs", {"--state", "job_state_unspecified"}), 2);
  EXPECT_EQ(Run("jobs", {"--state", "runing"}), 2);
  EXPECT_NE(err_.str().find("--state: unknown state 'runing' (states: pending, scheduled, running"), std::string::npos)
      << err_.str();
  for (const auto& [cmd, args, want] : std::vector<std::tuple<std::string, std::vector<std::string>, std::string>>{
           {"jobs", {"--stat", "pending"}, "unknown flag --stat (did you mean --state?)"},
           {"submit", {yaml, "--wach"}, "unknown flag --wach (did you mean --watch?)"},
           {"status", {"job-1", "--jsn"}, "unknown flag --jsn (did you mean --json?)"},
           {"logs", {"job-1", "--folow"}, "unknown flag --folow (did you mean --follow?)"},
           {"cancel", {"job-1", "--bogus"}, "unknown flag --bogus"},
           {"status", {"job-1", "job-2"}, "unexpected argument 'job-2'"},
           {"logs", {"job-1", "--rank", "x"}, "--rank: expected a non-negative integer, got 'x'"},
           {"jobs", {"--timeout-s", "0"}, "--timeout-s: expected a positive integer, got '0'"},
       }) {
    EXPECT_EQ(Run(cmd, args), 2) << cmd;
    EXPECT_NE(err_.str().find(want), std::string::npos) << cmd << ": " << err_.str();
  }
  // --help: the usage on stdout, exit 0, for each client command.
  for (const char* cmd : {"submit", "jobs", "status", "cancel", "logs"}) {
    EXPECT_EQ(Run(cmd, {"--help"}, false), 0) << cmd;
    EXPECT_EQ(out_.str().rfind(std::string("usage: loom ") + cmd, 0), 0u) << out_.str();
    EXPECT_NE(out_.str().find("--coordinator HOST:PORT"), std::string::npos) << out_.str();
  }
}

TEST_F(ClientCommandsTest, TokenProblemsAreReported) {
  std::string yaml = root_ + "/job.yaml";
  std::string addr = "--coordinator=127.0.0.1:" + std::to_string(server_->port());
  EXPECT_EQ(Run("jobs", {addr, "--data-dir=" + root_ + "/empty"}, false), 2);
  EXPECT_NE(err_.str().find("no token"), std::string::npos) << err_.str();
  setenv("LOOM_TOKEN", "not-the-token", 1);
  EXPECT_EQ(Run("jobs", {addr}, false), 2);
  EXPECT_NE(err_.str().find("UNAUTHENTICATED"), std::string::npos) << err_.str();
  setenv("LOOM_TOKEN", server_->token().c_str(), 1);
  EXPECT_EQ(Run("jobs", {addr}, false), 0) << err_.str();
  unsetenv("LOOM_TOKEN");
}

TEST_F(ClientCommandsTest, StatusCancelWatchJobsAndLogs) {
  std::string yaml = root_ + "/job.yaml";
  ASSERT_EQ(Run("submit", {yaml, "--wait-for-capacity"}), 0) << err_.str();
  ASSERT_EQ(Run("submit", {yaml, "--wait-for-capacity"}), 0) << err_.str();  // no key: a new job
  EXPECT_EQ(out_.str().rfind("job-2", 0), 0u) << out_.str();
  ASSERT_EQ(Run("status", {"job-1"}), 0);
  EXPECT_NE(out_.str().find("waiting: larger than the cluster"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("  submitter=default\n"), std::string::npos) << out_.str();
  EXPECT_EQ(Run("status", {"job-99"}), 2);
  EXPECT_NE(err_.str().find("NOT_FOUND"), std::string::npos);
  EXPECT_EQ(Run("status", {"garbage"}), 2);
  EXPECT_NE(err_.str().find("job_id"), std::string::npos);
  ASSERT_EQ(Run("cancel", {"job-1"}), 0);
  EXPECT_NE(out_.str().find("CANCELLED"), std::string::npos);
  EXPECT_EQ(Run("cancel", {"job-1"}), 2);
  EXPECT_NE(err_.str().find("FAILED_PRECONDITION"), std::string::npos);
  EXPECT_EQ(Run("status", {"job-1", "--watch"}), 1);  // ended, not SUCCEEDED
  EXPECT_NE(out_.str().find("CANCELLED"), std::string::npos);
  ASSERT_EQ(Run("jobs", {"--state", "PENDING"}), 0);
  EXPECT_EQ(out_.str().rfind("job-2\tPENDING\tcli", 0), 0u) << out_.str();
  EXPECT_NE(out_.str().find("\tsubmitter=default\n"), std::string::npos) << out_.str();
  EXPECT_EQ(Lines(), 1);
  EXPECT_EQ(Run("jobs", {"--state", "BOGUS"}), 2);
  ASSERT_EQ(Run("jobs", {"--limit", "1"}), 0);
  EXPECT_EQ(Lines(), 1);

  std::string log = root_ + "/r0.out";
  std::ofstream(log) << "step 1 loss 5.5\n";
  ASSERT_TRUE(server_->coordinator()->store()->AddLog({2, 0, "stdout", log}).ok());
  ASSERT_EQ(Run("logs", {"job-2", "--rank", "0"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "step 1 loss 5.5\n");
}

TEST_F(ClientCommandsTest, UnreachableCoordinatorIsARuntimeFailure) {
  std::string port = std::to_string(server_->port());
  server_.reset();
  EXPECT_EQ(Run("submit", {root_ + "/job.yaml", "--coordinator=127.0.0.1:" + port, "--data-dir=" + root_ + "/data",
                           "--timeout-s=1"},
                false),
            1);
  EXPECT_NE(err_.str().find("UNAVAILABLE"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace loom::runtime::service
