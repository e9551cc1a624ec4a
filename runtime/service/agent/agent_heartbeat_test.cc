// The agent's heartbeat thread keeps beating while its order thread is held
// up in a slow call. The coordinator side is a scripted NodeService: each
// poll after the first answers only after 2 s, as a coordinator stalled on
// its disk would, and the service counts the Heartbeat calls and checks
// their credential.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"
#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/service/agent/agent.h"
#include "runtime/service/auth/token.h"

namespace loom::runtime::service::agent {
namespace {

constexpr int kIntervalMs = 100;
constexpr int kSlowPollMs = 2000;

class SlowNodeService final : public v1::NodeService::Service {
 public:
  grpc::Status RegisterAgent(grpc::ServerContext*, const v1::RegisterAgentRequest*,
                             v1::RegisterAgentResponse* resp) override {
    resp->set_agent_id("agent-1-test");
    resp->set_agent_secret(std::string(64, 'a'));
    resp->set_heartbeat_interval_ms(kIntervalMs);
    resp->set_incarnation("one");
    return grpc::Status::OK;
  }
  grpc::Status PollOrders(grpc::ServerContext*, const v1::PollOrdersRequest*, v1::PollOrdersResponse* resp) override {
    if (polls_++ > 0) {
      slow_polls_started_ = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(kSlowPollMs));
    }
    resp->set_incarnation("one");
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    if (req->agent_id() != "agent-1-test" ||
        auth::BearerOf(ctx->client_metadata()) != auth::AgentBearer("agent-1-test", std::string(64, 'a'))) {
      ++wrong_credential_;
    }
    if (slow_polls_started_) ++beats_while_slow_;
    resp->set_incarnation("one");
    return grpc::Status::OK;
  }

  std::atomic<int> polls_{0}, beats_while_slow_{0}, wrong_credential_{0};
  std::atomic<bool> slow_polls_started_{false};
};

TEST(AgentHeartbeat, BeatsWhileTheOrderThreadWaitsOnASlowCall) {
  SlowNodeService service;
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  const char* tmp = std::getenv("TEST_TMPDIR");
  AgentOptions o;
  o.coordinator = "127.0.0.1:" + std::to_string(port);
  o.join_token = "join";
  o.data_dir = std::string(tmp ? tmp : "/tmp") + "/agent_heartbeat";
  std::filesystem::remove_all(o.data_dir);
  o.worker_argv = {"/bin/true"};
  Agent agent(o);
  ASSERT_TRUE(agent.Start().ok());
  // One slow poll is under way for most of this window.
  std::this_thread::sleep_for(std::chrono::milliseconds(kSlowPollMs));
  agent.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_GE(service.polls_.load(), 2);
  // About 20 intervals pass while the order thread waits; the bound leaves
  // room for a loaded machine, and an agent without the thread sends none.
  EXPECT_GE(service.beats_while_slow_.load(), 5);
  EXPECT_EQ(service.wrong_credential_.load(), 0);
}

}  // namespace
}  // namespace loom::runtime::service::agent
