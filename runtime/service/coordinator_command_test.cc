#include "runtime/service/coordinator_command.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "gtest/gtest.h"
#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/service/auth/token.h"

namespace loom::service {
namespace {

using Env = std::map<std::string, std::string>;

absl::StatusOr<CoordinatorFlags> Parse(const std::vector<std::string>& args, const Env& env = {}) {
  return ParseCoordinatorFlags(args, [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(CoordinatorFlags, DefaultsEnvAndFlags) {
  auto f = Parse({}, {{"LOOM_DATA_DIR", "/d"}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->server.coordinator.data_dir, "/d");
  EXPECT_EQ(f->server.listen_address, "127.0.0.1:7070");  // loopback by default
  EXPECT_EQ(f->server.metrics_host, "127.0.0.1");
  EXPECT_EQ(f->server.metrics_port, 7071);
  f = Parse({"--listen=0.0.0.0:9000", "--metrics-listen", "off", "--allowed-roots=/a,/b", "--heartbeat-ms", "50"},
            {{"LOOM_LISTEN", "127.0.0.1:1"}, {"LOOM_MAX_REQUEST_BYTES", "2048"}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->server.listen_address, "0.0.0.0:9000");
  EXPECT_EQ(f->server.metrics_port, -1);
  EXPECT_EQ(f->server.max_receive_bytes, 2048);
  EXPECT_EQ(f->server.coordinator.allowed_roots, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(f->server.coordinator.heartbeat_interval_ms, 50);
  EXPECT_TRUE(f->server.tls_cert_file.empty());
  f = Parse({"--tls-cert=/c.pem", "--tls-key", "/k.pem"}, {{"LOOM_TLS_CLIENT_CA", "/ca.pem"}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->server.tls_cert_file, "/c.pem");
  EXPECT_EQ(f->server.tls_key_file, "/k.pem");
  EXPECT_EQ(f->server.tls_client_ca_file, "/ca.pem");
}

TEST(CoordinatorFlags, BadFlagsNameTheFlag) {
  EXPECT_NE(std::string(Parse({"--bogus=1"}).status().message()).find("--bogus"), std::string::npos);
  EXPECT_NE(std::string(Parse({"--heartbeat-ms=x"}).status().message()).find("--heartbeat-ms"), std::string::npos);
  EXPECT_NE(std::string(Parse({}, {{"LOOM_MAX_REQUEST_BYTES", "-5"}}).status().message()).find("--max-request-bytes"),
            std::string::npos);
  EXPECT_NE(std::string(Parse({"--metrics-listen=nowhere"}).status().message()).find("--metrics-listen"),
            std::string::npos);
  EXPECT_FALSE(Parse({"--listen"}).ok());
  EXPECT_FALSE(Parse({"stray"}).ok());
}

// Starts the daemon binary; returns its pid and the bound gRPC port.
pid_t StartDaemon(const std::string& data_dir, int* port) {
  std::string port_file = data_dir + ".port";
  std::filesystem::remove(port_file);
  pid_t pid = fork();
  if (pid == 0) {
    execl("runtime/service/loom_coordinator", "loom_coordinator", "--data-dir", data_dir.c_str(), "--listen",
          "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--port-file", port_file.c_str(), nullptr);
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    if (in >> *port) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

int WaitExit(pid_t pid, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

std::unique_ptr<v1::JobService::Stub> Connect(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  return v1::JobService::NewStub(
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
}

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  AddBearer(c.get(), token);
  return c;
}

TEST(CoordinatorDaemon, AcknowledgedJobSurvivesKillDashNineThenCleanShutdown) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/daemon_data";
  std::filesystem::remove_all(dir);
  int port = 0;
  pid_t pid = StartDaemon(dir, &port);
  ASSERT_GT(pid, 0) << "daemon did not start";
  // The CLI's way to the token: the data folder.
  auto token = FindClientToken(dir);
  ASSERT_TRUE(token.ok()) << token.status();
  auto stub = Connect(port);
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("survivor");
  req.set_idempotency_key("once");
  req.set_wait_for_capacity(true);
  v1::SubmitJobResponse resp;
  grpc::Status st = stub->SubmitJob(Ctx(*token).get(), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(kill(pid, SIGKILL), 0);  // right after the acknowledgement
  int status = WaitExit(pid, 10);
  EXPECT_TRUE(WIFSIGNALED(status));

  pid = StartDaemon(dir, &port);
  ASSERT_GT(pid, 0) << "daemon did not restart";
  EXPECT_EQ(*FindClientToken(dir), *token);
  stub = Connect(port);
  v1::GetJobRequest get;
  get.set_job_id(resp.job().job_id());
  v1::GetJobResponse got;
  st = stub->GetJob(Ctx(*token).get(), get, &got);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(got.job().state(), v1::PENDING);
  EXPECT_EQ(got.spec().name(), "survivor");
  v1::SubmitJobResponse again;
  ASSERT_TRUE(stub->SubmitJob(Ctx(*token).get(), req, &again).ok());  // a client retry
  EXPECT_TRUE(again.existing());
  EXPECT_EQ(again.job().job_id(), resp.job().job_id());
  v1::ListJobsResponse all;
  ASSERT_TRUE(stub->ListJobs(Ctx(*token).get(), {}, &all).ok());
  EXPECT_EQ(all.jobs_size(), 1);
  st = stub->GetJob(Ctx("wrong").get(), get, &got);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  status = WaitExit(pid, 10);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace loom::service
