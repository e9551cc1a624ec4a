#include "runtime/service/dashboard/api_json.h"

#include <map>

#include "absl/time/time.h"
#include "runtime/service/coordinator.h"

namespace loom::runtime::service::dashboard {
namespace {

template <typename T>
Json OrNull(bool has, T v) {
  return has ? Json(v) : Json(nullptr);
}

}  // namespace

Json Rfc3339(int64_t unix_ms) {
  if (unix_ms == 0) return nullptr;
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

Json JobSummary(const v1::JobStatus& s) {
  return Json{
      {"id", s.job_id()},
      {"name", s.name()},
      {"state", v1::JobState_Name(s.state())},
      {"step", s.current_step()},
      {"total_steps", OrNull(s.total_steps() > 0, s.total_steps())},
      {"tokens_per_s", OrNull(s.has_tokens_per_s(), s.tokens_per_s())},
      {"loss", OrNull(s.has_loss(), s.loss())},
      {"created_at", Rfc3339(s.submit_time_unix_ms())},
      {"updated_at", Rfc3339(s.update_time_unix_ms())},
      {"submitter", s.submitter()},
      {"attempt", s.restart_count() + 1},
      {"restarts", s.restart_count()},
  };
}

Json PointJson(const v1::MetricPoint& p) {
  return Json{
      {"step", p.step()},
      {"loss", OrNull(p.has_loss(), p.loss())},
      {"val_loss", OrNull(p.has_val_loss(), p.val_loss())},
      {"lr", OrNull(p.has_lr(), p.lr())},
      {"tokens_per_s", OrNull(p.has_tokens_per_s(), p.tokens_per_s())},
      {"step_time_ms", OrNull(p.has_step_time_ms(), p.step_time_ms())},
      {"rank", p.rank()},
      {"at", Rfc3339(p.time_unix_ms())},
  };
}

Json HistoryJson(const std::vector<store::JobEventRecord>& events) {
  Json out = Json::array();
  for (const store::JobEventRecord& e : events) {
    out.push_back(Json{{"state", v1::JobState_Name(e.state)}, {"at", Rfc3339(e.time_ms)}, {"reason", e.message}});
  }
  return out;
}

Json RanksJson(const v1::JobStatus& s, const v1::ListAgentsResponse& agents,
               const std::vector<v1::MetricPoint>& points) {
  std::map<std::string, std::string> hosts;
  for (const v1::AgentStatus& a : agents.agents()) hosts[a.agent_id()] = a.hostname();
  std::map<int32_t, std::string> placed;
  for (const v1::RankPlacement& p : s.placement()) placed[p.rank()] = p.agent_id();
  std::map<int32_t, int64_t> steps;
  for (const v1::MetricPoint& p : points) steps[p.rank()] = std::max(steps[p.rank()], p.step());
  Json out = Json::array();
  for (int32_t r = 0; r < s.world_size(); ++r) {
    const bool exited = r < s.exit_codes_size() && s.exit_codes(r) != kExitUnknown;
    auto agent = placed.find(r);
    Json step = nullptr;
    if (auto it = steps.find(r); it != steps.end()) {
      step = it->second;
    } else if (r == 0) {
      step = s.current_step();
    }
    std::string state = exited ? (s.exit_codes(r) == 0 ? "EXITED" : "FAILED")
                               : (agent != placed.end() ? v1::JobState_Name(s.state()) : "UNPLACED");
    out.push_back(Json{
        {"rank", r},
        {"host", agent != placed.end() ? Json(hosts[agent->second]) : Json(nullptr)},
        {"agent_id", agent != placed.end() ? Json(agent->second) : Json(nullptr)},
        {"step", step},
        {"exit_code", exited ? Json(s.exit_codes(r)) : Json(nullptr)},
        {"root_cause", s.root_cause_rank() == r ? Json(s.root_cause()) : Json(nullptr)},
        {"state", state},
    });
  }
  return out;
}

Json AgentsJson(const v1::ListAgentsResponse& agents) {
  Json list = Json::array();
  for (const v1::AgentStatus& a : agents.agents()) {
    Json running = Json::array();
    for (const v1::AgentRank& r : a.running()) running.push_back(Json{{"job_id", r.job_id()}, {"rank", r.rank()}});
    list.push_back(Json{
        {"id", a.agent_id()},
        {"host", a.hostname()},
        {"state", a.state()},
        {"cpus", a.resources().cpu_slots()},
        {"gpus", a.resources().gpus()},
        {"memory_bytes", a.resources().memory_bytes()},
        {"last_heartbeat", Rfc3339(a.last_heartbeat_unix_ms())},
        {"running_ranks", running},
    });
  }
  return Json{{"agents", list}};
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace loom::runtime::service::dashboard
