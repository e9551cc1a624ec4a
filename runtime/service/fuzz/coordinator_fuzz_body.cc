#include "runtime/service/fuzz/coordinator_fuzz_body.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/service/coordinator.h"

namespace loom::runtime::service::fuzz {
namespace {

constexpr size_t kMaxMessageBytes = 4096;
constexpr const char* kAgent = "agent-1-node";

void Check(const absl::Status& s, const char* call) {
  if (s.ok()) return;
  const size_t n = s.message().size();
  if (n > 0 && n <= kMaxMessageBytes) return;
  std::fprintf(stderr, "%s: error message of %zu bytes: %.300s\n", call, n, std::string(s.message()).c_str());
  std::abort();
}

// One coordinator for the process, with one registered agent and one job
// that waits for capacity (two ranks, one slot).
Coordinator& Instance() {
  static Coordinator* c = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/loom_coordinator_fuzz_XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) std::abort();
    CoordinatorOptions o;
    o.data_dir = dir + "/data";
    o.allowed_roots = {dir + "/runs"};
    o.heartbeat_interval_ms = 3600 * 1000;  // no agent is lost while fuzzing
    auto created = Coordinator::Create(o);
    if (!created.ok()) {
      std::fprintf(stderr, "coordinator: %s\n", std::string(created.status().message()).c_str());
      std::abort();
    }
    Coordinator* made = created->release();
    v1::RegisterAgentRequest reg;
    reg.set_hostname("node");
    reg.mutable_resources()->set_cpu_slots(1);
    AgentCaller join;
    join.join = true;
    auto agent = made->RegisterAgent(reg, join);
    if (!agent.ok() || agent->agent_id() != kAgent) std::abort();
    v1::SubmitJobRequest submit;
    submit.set_wait_for_capacity(true);
    submit.mutable_spec()->set_name("live");
    submit.mutable_spec()->mutable_model()->set_family("gpt");
    submit.mutable_spec()->mutable_parallel()->set_dp(2);
    if (!made->Submit(submit).ok()) std::abort();
    return made;
  }();
  return *c;
}

template <typename Request>
bool Decode(const std::string& bytes, Request* r) {
  return r->ParseFromString(bytes);
}

// The NodeService calls, from the registered agent; `agent_id` is the
// request's, refused when it is not the caller's (as server.cc does).
void NodeCall(Coordinator& c, int call, const std::string& body) {
  auto refuse_other = [&](const std::string& id, const char* name) {
    if (id == kAgent) return false;
    Check(c.RefuseNodeCall(name, kAgent, "agent_id is not the caller's id"), name);
    return true;
  };
  switch (call) {
    case 4: {
      v1::RegisterAgentRequest r;
      if (!Decode(body, &r)) return;
      AgentCaller caller;
      caller.join = r.agent_id().empty();
      caller.agent_id = caller.join ? "" : kAgent;
      if (!caller.join && refuse_other(r.agent_id(), "RegisterAgent")) return;
      Check(c.RegisterAgent(r, caller).status(), "RegisterAgent");
      return;
    }
    case 5: {
      v1::HeartbeatRequest r;
      if (!Decode(body, &r) || refuse_other(r.agent_id(), "Heartbeat")) return;
      Check(c.Heartbeat(r.agent_id()), "Heartbeat");
      return;
    }
    case 6: {
      v1::PollOrdersRequest r;
      if (!Decode(body, &r) || refuse_other(r.agent_id(), "PollOrders")) return;
      Check(c.PollOrders(r.agent_id(), std::min(r.wait_ms(), 0)).status(), "PollOrders");
      return;
    }
    case 7: {
      v1::ReportExitRequest r;
      if (!Decode(body, &r) || refuse_other(r.agent_id(), "ReportExit")) return;
      Check(c.ReportExit(r), "ReportExit");
      return;
    }
    case 8: {
      v1::ReportProgressRequest r;
      if (!Decode(body, &r) || refuse_other(r.agent_id(), "ReportProgress")) return;
      Check(c.ReportProgress(r), "ReportProgress");
      return;
    }
    default: {
      v1::AppendLogsRequest r;
      if (!Decode(body, &r) || refuse_other(r.agent_id(), "AppendLogs")) return;
      Check(c.AppendLogs(r), "AppendLogs");
      return;
    }
  }
}

}  // namespace

void FuzzCoordinator(const uint8_t* data, size_t size) {
  if (size == 0) return;
  Coordinator& c = Instance();
  const int call = data[0] % 10;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (call) {
    case 0: {
      v1::SubmitJobRequest r;
      if (Decode(body, &r)) Check(c.Submit(r).status(), "SubmitJob");
      return;
    }
    case 1: {
      v1::GetJobRequest r;
      if (Decode(body, &r)) Check(c.Get(r.job_id()).status(), "GetJob");
      return;
    }
    case 2: {
      v1::ListJobsRequest r;
      if (Decode(body, &r)) Check(c.List(r).status(), "ListJobs");
      return;
    }
    case 3: {
      v1::CancelJobRequest r;
      if (Decode(body, &r)) Check(c.Cancel(r.job_id()).status(), "CancelJob");
      return;
    }
    default:
      NodeCall(c, call, body);
  }
}

}  // namespace loom::runtime::service::fuzz
