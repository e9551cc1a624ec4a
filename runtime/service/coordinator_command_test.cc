#include "runtime/service/coordinator_command.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/service/auth/token.h"

namespace loom::runtime::service {
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
  EXPECT_FALSE(f->server.coordinator.init);
  EXPECT_EQ(f->server.coordinator.run_root, "/d/runs");  // confined by default: the run root
  EXPECT_TRUE(f->server.coordinator.data_roots.empty());
  EXPECT_TRUE(f->server.coordinator.allowed_roots.empty());
  EXPECT_EQ(f->server.coordinator.kill_grace_ms, 10000);
  EXPECT_TRUE(Parse({"--init"})->server.coordinator.init);
  EXPECT_TRUE(Parse({"--data-dir=/x", "--help"})->help);
  f = Parse({"--run-root=/r", "--data-roots", "/data1,/data2", "--kill-grace-ms=500"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->server.coordinator.run_root, "/r");
  EXPECT_EQ(f->server.coordinator.data_roots, (std::vector<std::string>{"/data1", "/data2"}));
  EXPECT_EQ(f->server.coordinator.kill_grace_ms, 500);
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

TEST(CoordinatorFlags, BackendAndSlurmFlags) {
  auto agents = Parse({});
  ASSERT_TRUE(agents.ok()) << agents.status();
  EXPECT_EQ(agents->backend, "agents");
  EXPECT_FALSE(agents->server.coordinator.make_placement) << "the agents are the built-in placement";
  auto slurm = Parse({"--backend", "slurm", "--slurm-ranks-per-node=4", "--slurm-partition", "gpu",
                      "--slurm-loom", "/shared/bin/loom", "--slurm-poll-ms", "250", "--slurm-timeout-ms", "5000"});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->backend, "slurm");
  EXPECT_TRUE(slurm->server.coordinator.make_placement);
  EXPECT_EQ(slurm->slurm.ranks_per_node, 4);
  EXPECT_EQ(slurm->slurm.partition, "gpu");
  EXPECT_EQ(slurm->slurm.loom, "/shared/bin/loom");
  EXPECT_EQ(slurm->slurm.poll_ms, 250);
  EXPECT_EQ(slurm->slurm.command_timeout_ms, 5000);
  auto message = [](const std::vector<std::string>& args) { return std::string(Parse(args).status().message()); };
  EXPECT_NE(message({"--backend=yarn"}).find("--backend: expected agents or slurm, got 'yarn'"), std::string::npos);
  EXPECT_NE(message({"--slurm-poll-ms=100"}).find("--slurm-poll-ms: applies to --backend slurm only"),
            std::string::npos);
  EXPECT_NE(message({"--backend=slurm", "--slurm-ranks-per-node=0"}).find("--slurm-ranks-per-node"),
            std::string::npos);
  EXPECT_NE(message({"--backend=slurm", "--slurm-timeout-ms=x"}).find("--slurm-timeout-ms"), std::string::npos);
}

// Starts the daemon binary (stderr to <data_dir>.log); returns its pid and the
// bound gRPC port, or -1 when it did not come up (it may have exited).
pid_t StartDaemon(const std::string& data_dir, int* port, const std::string& listen = "127.0.0.1:0",
                  const std::vector<std::string>& extra = {}) {
  std::string port_file = data_dir + ".port";
  std::filesystem::remove(port_file);
  std::vector<std::string> argv = {"runtime/service/loom_coordinator", "--data-dir", data_dir, "--listen", listen,
                                   "--metrics-listen", "off", "--port-file", port_file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  pid_t pid = fork();
  if (pid == 0) {
    if (freopen((data_dir + ".log").c_str(), "a", stderr) == nullptr) _exit(126);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    if (in >> *port) return pid;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TmpDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir + ".log");
  return dir;
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
  auth::AddBearer(c.get(), token);
  return c;
}

// A second coordinator on the same data folder, or on the same port, does not
// start: it exits 1 saying why, and the first keeps serving.
TEST(CoordinatorDaemon, SecondCoordinatorOnTheSameFolderOrPortIsRefused) {
  std::string dir = TmpDir("single_a"), other = TmpDir("single_b");
  int port = 0, port2 = 0;
  pid_t first = StartDaemon(dir, &port);
  ASSERT_GT(first, 0) << ReadAll(dir + ".log");
  pid_t second = StartDaemon(dir, &port2);
  EXPECT_EQ(second, -1) << "a second coordinator started on the same data folder";
  EXPECT_NE(ReadAll(dir + ".log").find("is in use by another coordinator (pid " + std::to_string(first)),
            std::string::npos)
      << ReadAll(dir + ".log");
  EXPECT_EQ(StartDaemon(other, &port2, "127.0.0.1:" + std::to_string(port)), -1)
      << "a second coordinator started on port " << port;
  EXPECT_NE(ReadAll(other + ".log").find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << ReadAll(other + ".log");
  auto token = auth::FindClientToken(dir);
  ASSERT_TRUE(token.ok());
  v1::ListJobsResponse all;
  EXPECT_TRUE(Connect(port)->ListJobs(Ctx(*token).get(), {}, &all).ok());
  // Once the first is gone, the folder is free again.
  ASSERT_EQ(kill(first, SIGTERM), 0);
  EXPECT_EQ(WaitExit(first, 10), 0);
  pid_t again = StartDaemon(dir, &port2);
  EXPECT_GT(again, 0) << ReadAll(dir + ".log");
  if (again > 0) {
    kill(again, SIGTERM);
    WaitExit(again, 10);
  }
}

// loom.db deleted after the folder held a store: the daemon refuses to start
// empty (exit 1, naming --init) until --init; then job ids do not repeat.
TEST(CoordinatorDaemon, LostJobStoreNeedsInitAndJobIdsContinue) {
  std::string dir = TmpDir("lost_store");
  int port = 0;
  pid_t pid = StartDaemon(dir, &port);
  ASSERT_GT(pid, 0) << ReadAll(dir + ".log");
  auto token = auth::FindClientToken(dir);
  ASSERT_TRUE(token.ok());
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("first");
  req.set_wait_for_capacity(true);
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(Connect(port)->SubmitJob(Ctx(*token).get(), req, &resp).ok());
  EXPECT_EQ(resp.job().job_id(), "job-1");
  kill(pid, SIGTERM);
  ASSERT_EQ(WaitExit(pid, 10), 0);
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(dir + "/loom.db" + suffix);

  EXPECT_EQ(StartDaemon(dir, &port), -1) << "started over a lost loom.db";
  EXPECT_NE(ReadAll(dir + ".log").find("loom.db is missing"), std::string::npos) << ReadAll(dir + ".log");
  EXPECT_NE(ReadAll(dir + ".log").find("--init"), std::string::npos);
  pid = StartDaemon(dir, &port, "127.0.0.1:0", {"--init"});
  ASSERT_GT(pid, 0) << ReadAll(dir + ".log");
  ASSERT_TRUE(Connect(port)->SubmitJob(Ctx(*token).get(), req, &resp).ok());
  EXPECT_NE(resp.job().job_id(), "job-1");
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, 10), 0);
}

TEST(CoordinatorDaemon, AcknowledgedJobSurvivesKillDashNineThenCleanShutdown) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/daemon_data";
  std::filesystem::remove_all(dir);
  int port = 0;
  pid_t pid = StartDaemon(dir, &port);
  ASSERT_GT(pid, 0) << "daemon did not start";
  // The CLI's way to the token: the data folder.
  auto token = auth::FindClientToken(dir);
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
  EXPECT_EQ(*auth::FindClientToken(dir), *token);
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
}  // namespace loom::runtime::service

namespace loom::runtime::service {
namespace {

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::filesystem::remove(path);
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

// A bad tokens file stops the daemon at start with exit 2 and a message that
// names the file and line (never the token).
TEST(CoordinatorDaemon, BadTokensFileExitsTwoNamingTheLine) {
  const std::string dir = TmpDir("bad_tokens");
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/tokens";
  struct Case {
    std::string text;
    mode_t mode;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"alice 0123456789abcdef0123\nbob\n", 0600, file + ":2: expected 'name token', got 1 field(s)"},
      {"# ops\n\nal!ce 0123456789abcdef0123\n", 0600, file + ":3: name: must match"},
      {"alice short\n", 0600, file + ":1: token of 'alice': must be at least 16"},
      {"alice 0123456789abcdef0123\nalice fedcba9876543210fedc\n", 0600, file + ":2: name 'alice' appears twice"},
      {"alice 0123456789abcdef0123\nbob 0123456789abcdef0123\n", 0600, file + ":2: token of 'bob' is also"},
      {"alice 0123456789abcdef0123\n", 0644, file + " is readable by group or others"},
      {"\n# nothing\n", 0600, file + " holds no token"},
      {"default 0123456789abcdef0123\n", 0600, "'default' clashes with the default token"},
  };
  for (const Case& c : cases) {
    WriteFile(file, c.text, c.mode);
    std::filesystem::remove(dir + "/data.log");
    int port = 0;
    pid_t pid = StartDaemon(dir + "/data", &port, "127.0.0.1:0", {"--tokens-file", file});
    ASSERT_EQ(pid, -1) << "started with tokens file:\n" << c.text;
    const std::string log = ReadAll(dir + "/data.log");
    EXPECT_NE(log.find(c.says), std::string::npos) << log;
    EXPECT_EQ(log.find("0123456789abcdef0123"), std::string::npos) << "a token in the message: " << log;
  }
  std::vector<std::string> argv = {"runtime/service/loom_coordinator", "--data-dir", dir + "/exit",
                                   "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--tokens-file", file};
  WriteFile(file, "bob\n", 0600);
  pid_t pid = fork();
  if (pid == 0) {
    if (freopen("/dev/null", "w", stderr) == nullptr) _exit(126);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = WaitExit(pid, 20);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

// Named tokens: each is accepted, a job records the name that submitted it,
// and the name survives a restart of the daemon.
TEST(CoordinatorDaemon, NamedTokensRecordTheSubmitterAcrossRestart) {
  const std::string dir = TmpDir("named_tokens");
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/tokens";
  WriteFile(file, "# team tokens\nalice aaaaaaaaaaaaaaaaaaaa-1\nbob   bbbbbbbbbbbbbbbbbbbb-2\n", 0600);
  int port = 0;
  pid_t pid = StartDaemon(dir + "/data", &port, "127.0.0.1:0", {"--tokens-file", file});
  ASSERT_GT(pid, 0) << ReadAll(dir + "/data.log");
  auto submit = [&](const std::string& token, const std::string& name) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name(name);
    req.set_wait_for_capacity(true);
    v1::SubmitJobResponse resp;
    grpc::Status s = Connect(port)->SubmitJob(Ctx(token).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job();
  };
  auto default_token = auth::FindClientToken(dir + "/data");
  ASSERT_TRUE(default_token.ok());
  EXPECT_EQ(submit("aaaaaaaaaaaaaaaaaaaa-1", "by-alice").submitter(), "alice");
  EXPECT_EQ(submit("bbbbbbbbbbbbbbbbbbbb-2", "by-bob").submitter(), "bob");
  EXPECT_EQ(submit(*default_token, "by-default").submitter(), "default");
  v1::ListJobsResponse refused;
  EXPECT_EQ(Connect(port)->ListJobs(Ctx("cccccccccccccccccccc-3").get(), {}, &refused).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  kill(pid, SIGTERM);
  ASSERT_EQ(WaitExit(pid, 10), 0);

  pid = StartDaemon(dir + "/data", &port, "127.0.0.1:0", {"--tokens-file", file});
  ASSERT_GT(pid, 0) << ReadAll(dir + "/data.log");
  v1::ListJobsResponse all;
  ASSERT_TRUE(Connect(port)->ListJobs(Ctx("bbbbbbbbbbbbbbbbbbbb-2").get(), {}, &all).ok());
  ASSERT_EQ(all.jobs_size(), 3);
  EXPECT_EQ(all.jobs(0).submitter(), "alice");
  EXPECT_EQ(all.jobs(1).submitter(), "bob");
  EXPECT_EQ(all.jobs(2).submitter(), "default");
  EXPECT_EQ(all.total_size(), 3);
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, 10), 0);
}

}  // namespace
}  // namespace loom::runtime::service
