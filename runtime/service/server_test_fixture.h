// Shared fixture for the coordinator's gRPC tests: a real server on a
// loopback port (fresh data folder per test), real stubs with the bearer
// token, and helpers that play an agent through NodeService (registering with
// the join token, then calling with the agent's own credential).
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/server.h"

namespace loom::runtime::service {

using grpc::StatusCode;

inline std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string d = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline v1::JobSpec Spec(const std::string& name, int dp = 1, int tp = 1) {
  v1::JobSpec s;
  s.set_name(name);
  s.mutable_model()->set_family("gpt");
  s.mutable_model()->set_n_head(4);
  s.mutable_model()->set_d_model(64);
  s.mutable_parallel()->set_dp(dp);
  s.mutable_parallel()->set_tp(tp);
  s.set_max_restarts(1);
  return s;
}

// Makes a throwaway CA, a server certificate (127.0.0.1) and one client
// certificate per name in `clients` (<name>.pem, <name>.key, CN=<name>) with
// the openssl CLI (EC keys: fast). Its output goes to <d>/openssl.log.
inline bool MakeCerts(const std::string& d, const std::vector<std::string>& clients = {"client"}) {
  std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string cmd =
      "cd " + d + " && set -e && " +
      "openssl req -x509 " + ec + " -keyout ca.key -out ca.pem -days 1 -subj /CN=loom-test-ca && " +
      "openssl req " + ec + " -keyout server.key -out server.csr -subj /CN=localhost && " +
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > server.ext && " +
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 "
      "-extfile server.ext && printf 'extendedKeyUsage=clientAuth' > client.ext";
  for (const std::string& c : clients) {
    cmd += " && openssl req " + ec + " -keyout " + c + ".key -out " + c + ".csr -subj /CN=" + c +
           " && openssl x509 -req -in " + c + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " + c +
           ".pem -days 1 -extfile client.ext";
  }
  return std::system(("(" + cmd + ") > " + d + "/openssl.log 2>&1").c_str()) == 0;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(1000); }

  void StartServer(int heartbeat_ms, bool fresh = true) {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    root_ = fresh ? FreshDir(name) : root_;
    ServerOptions o;
    o.coordinator.data_dir = root_ + "/data";
    o.coordinator.allowed_roots = {root_ + "/runs"};
    o.coordinator.heartbeat_interval_ms = heartbeat_ms;
    o.coordinator.reclaim_grace_ms = 0;  // reclaim within 3 heartbeats, as the tests time it
    o.coordinator.metrics = &registry_;
    o.max_receive_bytes = max_receive_bytes_;
    o.metrics_port = metrics_port_;
    o.tokens_file = tokens_file_;
    auto s = CoordinatorServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    args.SetMaxSendMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    jobs_ = v1::JobService::NewStub(channel_);
    nodes_ = v1::NodeService::NewStub(channel_);
  }

  // A client context with the right token (or `token`) and a 5 s deadline.
  std::unique_ptr<grpc::ClientContext> Ctx(const std::string* token = nullptr) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (token == nullptr) {
      auth::AddBearer(ctx.get(), server_->token());
    } else if (!token->empty()) {
      auth::AddBearer(ctx.get(), *token);
    }
    return ctx;
  }

  // A context carrying the join token.
  std::unique_ptr<grpc::ClientContext> JoinCtx() { return Ctx(&server_->join_token()); }

  // A context carrying `agent`'s credential (from its registration here).
  std::unique_ptr<grpc::ClientContext> AgentCtx(const std::string& agent) {
    const std::string bearer = auth::AgentBearer(agent, secrets_[agent]);
    return Ctx(&bearer);
  }

  grpc::Status Submit(const v1::JobSpec& spec, const std::string& key, v1::SubmitJobResponse* resp,
                      bool wait = false) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_idempotency_key(key);
    req.set_wait_for_capacity(wait);
    return jobs_->SubmitJob(Ctx().get(), req, resp);
  }

  v1::JobStatus Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    grpc::Status s = jobs_->GetJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job();
  }

  std::string Register(int slots, const std::string& host = "node") {
    v1::RegisterAgentRequest req;
    req.set_hostname(host);
    req.mutable_resources()->set_cpu_slots(slots);
    v1::RegisterAgentResponse resp;
    grpc::Status s = nodes_->RegisterAgent(JoinCtx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.agent_secret().size(), 64u);
    secrets_[resp.agent_id()] = resp.agent_secret();
    return resp.agent_id();
  }

  v1::PollOrdersResponse Poll(const std::string& agent, int wait_ms = 0) {
    v1::PollOrdersRequest req;
    req.set_agent_id(agent);
    req.set_wait_ms(wait_ms);
    v1::PollOrdersResponse resp;
    grpc::Status s = nodes_->PollOrders(AgentCtx(agent).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  grpc::Status Exit(const std::string& agent, const std::string& job, int rank, int code, int attempt = 0) {
    v1::ReportExitRequest req;
    req.set_agent_id(agent);
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_exit_code(code);
    req.set_attempt(attempt);
    req.set_error(code ? "boom on rank " + std::to_string(rank) : "");
    v1::ReportExitResponse resp;
    return nodes_->ReportExit(AgentCtx(agent).get(), req, &resp);
  }

  // Heartbeats `agent` every 50 ms until `pred` holds or 5 s pass.
  template <typename Pred>
  bool KeepAliveUntil(const std::string& agent, Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      v1::HeartbeatRequest h;
      h.set_agent_id(agent);
      v1::HeartbeatResponse hr;
      EXPECT_TRUE(nodes_->Heartbeat(AgentCtx(agent).get(), h, &hr).ok());
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  int TotalJobs() {
    int n = 0;
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    v1::ListJobsResponse resp;
    EXPECT_TRUE(jobs_->ListJobs(Ctx().get(), req, &resp).ok());
    n = resp.jobs_size();
    int64_t events = 0;
    for (const auto& j : resp.jobs()) events += server_->coordinator()->store()->Events(*ParseJobId(j.job_id()))->size();
    return n * 1000 + static_cast<int>(events);  // jobs and their history
  }

  std::string root_;
  int max_receive_bytes_ = 1 << 20;  // for the next StartServer
  int metrics_port_ = -1;            // for the next StartServer: 0 serves HTTP on a free port
  std::string tokens_file_;          // for the next StartServer
  metrics::Registry registry_;
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::NodeService::Stub> nodes_;
  std::map<std::string, std::string> secrets_;  // agent id -> secret
};

}  // namespace loom::runtime::service
