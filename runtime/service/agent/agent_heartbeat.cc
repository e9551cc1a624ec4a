// The agent's heartbeat thread (Agent::HeartbeatLoop in agent.h).
#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime/service/agent/agent.h"
#include "runtime/service/auth/token.h"

namespace loom::runtime::service::agent {
namespace {

// An order thread that has not finished a pass for this long is wedged: its
// RPCs carry 5 s deadlines, so a healthy pass is far shorter even against a
// slow coordinator.
constexpr int64_t kStuckOrderLoopMs = 60000;

}  // namespace

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Agent::HeartbeatLoop() {
  int64_t next = SteadyMs();
  while (!stop_) {
    const int64_t interval = std::max(10, heartbeat_ms_.load());
    next += interval;
    while (!stop_ && SteadyMs() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(next - SteadyMs(), 1, 50)));
    }
    if (stop_) break;
    next = std::max(next, SteadyMs() - interval);  // after a long stall, beat now rather than catch up
    if (SteadyMs() - order_pass_ms_.load() > std::max<int64_t>(kStuckOrderLoopMs, 10 * interval)) continue;
    v1::HeartbeatRequest req;
    std::string bearer;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (secret_.empty()) continue;  // not registered yet
      req.set_agent_id(agent_id_);
      bearer = auth::AgentBearer(agent_id_, secret_);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(std::max<int64_t>(interval, 1000)));
    auth::AddBearer(&ctx, bearer);
    v1::HeartbeatResponse resp;
    // A refusal (a restarted coordinator that does not know this agent yet)
    // needs nothing here: the order thread's next poll registers again.
    (void)stub_->Heartbeat(&ctx, req, &resp);
  }
}

}  // namespace loom::runtime::service::agent
