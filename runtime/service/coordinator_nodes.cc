// The agent-facing half of Coordinator (NodeService): registration and
// reconciliation, heartbeats, order delivery, exit/progress/log reports, and
// lost-agent handling. The job-facing half is in coordinator.cc.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/coordinator.h"

namespace loom::runtime::service {

absl::Status Coordinator::AuthenticateAgent(const std::string& agent_id, const std::string& secret,
                                            const std::string& cert_identity) {
  const std::string hash = auth::Sha256Hex(secret);
  std::lock_guard<std::mutex> l(mu_);
  auto it = credentials_.find(agent_id);
  if (it == credentials_.end() || !auth::ConstantTimeEquals(hash, it->second.secret_sha256)) {
    return absl::UnauthenticatedError("wrong agent credential");
  }
  if (!it->second.cert_identity.empty() && it->second.cert_identity != cert_identity) {
    std::fprintf(stderr, "loom coordinator: agent %s called with certificate identity '%s', not '%s': refused\n",
                 agent_id.c_str(), cert_identity.substr(0, 128).c_str(), it->second.cert_identity.c_str());
    return absl::UnauthenticatedError("wrong agent credential: not the client certificate this agent registered with");
  }
  return absl::OkStatus();
}

absl::Status Coordinator::RefuseLocked(const std::string& call, const std::string& agent_id, const std::string& why) {
  std::fprintf(stderr, "loom coordinator: refused %s from agent %s: %s\n", call.c_str(), agent_id.substr(0, 64).c_str(),
               why.c_str());
  if (m_refused_ != nullptr) m_refused_->With({call}).Inc();
  return absl::PermissionDeniedError(why);
}

absl::Status Coordinator::RefuseNodeCall(const std::string& call, const std::string& agent_id, const std::string& why) {
  std::lock_guard<std::mutex> l(mu_);
  return RefuseLocked(call, agent_id, why);
}

bool Coordinator::PlacedOnLocked(int64_t job, int32_t rank, const std::string& agent) const {
  const auto* placed = sched_.Placement(job);
  if (placed == nullptr) return false;
  for (const Slot& s : *placed) {
    if (s.rank == rank && s.agent_id == agent) return true;
  }
  return false;
}

absl::StatusOr<v1::RegisterAgentResponse> Coordinator::RegisterAgent(const v1::RegisterAgentRequest& req,
                                                                     const AgentCaller& caller) {
  const auto& res = req.resources();
  if (res.cpu_slots() < 0 || res.cpu_slots() > 1 << 16) {
    return absl::InvalidArgumentError(absl::StrCat("resources.cpu_slots: must be in [0, 65536], got ", res.cpu_slots()));
  }
  if (res.gpus() < 0 || res.gpus() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("resources.gpus: must be in [0, 1024], got ", res.gpus()));
  }
  if (res.memory_bytes() < 0 || res.memory_bytes() > (int64_t{1} << 50)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.memory_bytes: must be in [0, 2^50] (0: not reported), got ", res.memory_bytes()));
  }
  if (res.cpu_slots() == 0 && res.gpus() == 0) {
    return absl::InvalidArgumentError("resources: an agent must offer CPU slots or GPUs");
  }
  if (req.hostname().size() > 255 || req.agent_id().size() > 255) {
    return absl::InvalidArgumentError("hostname: longer than 255 bytes");
  }
  if (req.rendezvous_address().size() > 256) {
    return absl::InvalidArgumentError("rendezvous_address: longer than 256 bytes");
  }
  v1::RegisterAgentResponse resp;
  std::string id = caller.agent_id;
  if (caller.join) {
    if (!req.agent_id().empty()) {
      return RefuseNodeCall("RegisterAgent", req.agent_id(),
                            absl::StrCat("agent_id: reconnecting as '", req.agent_id().substr(0, 64),
                                         "' needs that agent's own credential; the join token registers new agents"));
    }
    LOOM_ASSIGN_OR_RETURN(std::string secret, auth::RandomHex(32));
    LOOM_ASSIGN_OR_RETURN(store::AgentRecord rec,
                          store_->InsertAgent(req.hostname(), auth::Sha256Hex(secret), caller.cert_identity));
    id = rec.id;
    resp.set_agent_secret(secret);
    std::lock_guard<std::mutex> l(mu_);
    credentials_[id] = {rec.secret_sha256, rec.cert_identity};
  } else if (!req.agent_id().empty() && req.agent_id() != caller.agent_id) {
    return RefuseNodeCall("RegisterAgent", caller.agent_id,
                          absl::StrCat("agent_id: '", req.agent_id().substr(0, 64), "' is not the caller's id"));
  }
  std::lock_guard<std::mutex> l(mu_);
  AgentInfo& a = agents_[id];
  lost_agents_.erase(id);
  a.resources = res;
  a.hostname = req.hostname().substr(0, 256);
  a.rendezvous_address = req.rendezvous_address();
  a.last_seen = std::chrono::steady_clock::now();
  sched_.UpsertAgent(id, res.cpu_slots(), res.gpus(), res.memory_bytes());
  for (const v1::RunningJob& running : req.running()) AdoptLocked(id, running);
  RunScheduleLocked();
  NotifyLocked();
  resp.set_agent_id(id);
  resp.set_heartbeat_interval_ms(opts_.heartbeat_interval_ms);
  return resp;
}

// Ranks an agent still runs: adopted when the job is live, in this attempt and
// not placed elsewhere for them; otherwise the agent is told to kill them.
void Coordinator::AdoptLocked(const std::string& agent_id, const v1::RunningJob& running) {
  auto kill = [&](const char* why) {
    std::fprintf(stderr, "loom coordinator: agent %s runs ranks of %s (attempt %d) that are not adoptable (%s): killing them\n",
                 agent_id.c_str(), running.job_id().c_str(), running.attempt(), why);
    auto* k = agents_[agent_id].orders.emplace_back().mutable_kill();
    k->set_job_id(running.job_id());
    k->set_grace_ms(opts_.kill_grace_ms);
  };
  auto id = ParseJobId(running.job_id());
  if (!id.ok()) return;
  auto r = store_->GetJob(*id);
  auto live = live_.find(*id);
  const char* why = !r.ok()                                 ? "unknown job"
                    : store::IsTerminal(r->state)           ? "job finished"
                    : live == live_.end()                   ? "job not live"
                    : r->state == v1::PENDING               ? "job queued"
                    : running.attempt() != r->restart_count ? "an earlier attempt"
                                                            : nullptr;
  if (why != nullptr) {
    kill(why);
    return;
  }
  std::vector<Slot> slots;
  if (const auto* placed = sched_.Placement(*id)) {
    for (const Slot& s : *placed) {
      if (s.agent_id == agent_id) return;  // already adopted (repeated registration)
    }
  }
  for (const v1::RankPlacement& p : running.ranks()) {
    if (p.rank() < 0 || p.rank() >= r->world_size) {
      kill("rank out of range");
      return;
    }
    slots.push_back({p.rank(), agent_id, p.gpu()});
  }
  if (!sched_.Adopt(*id, agent_id, slots, live->second.demand.gpu)) {
    kill("no room on the agent");
    return;
  }
  for (const Slot& s : slots) AddRankOwnerLocked(*id, s.rank, agent_id);
  std::fprintf(stderr, "loom coordinator: agent %s reclaimed %zu rank(s) of %s\n", agent_id.c_str(), slots.size(),
               running.job_id().c_str());
  const auto* placed = sched_.Placement(*id);
  if (placed && static_cast<int32_t>(placed->size()) == r->world_size) unclaimed_.erase(*id);
}

absl::Status Coordinator::Heartbeat(const std::string& agent_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) {
    return absl::NotFoundError(absl::StrCat("agent_id: unknown agent '", agent_id.substr(0, 64), "'; register again"));
  }
  it->second.last_seen = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

void Coordinator::NoteHeard(const std::string& agent_id, std::chrono::steady_clock::time_point at) {
  std::lock_guard<std::mutex> l(heard_mu_);
  auto [it, fresh] = heard_.try_emplace(agent_id, at);
  if (!fresh) it->second = std::max(it->second, at);
}

absl::StatusOr<v1::PollOrdersResponse> Coordinator::PollOrders(const std::string& agent_id, int wait_ms) {
  std::unique_lock<std::mutex> l(mu_);
  const int longest = std::min(5000, opts_.heartbeat_interval_ms);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp(wait_ms, 0, longest));
  for (;;) {
    auto it = agents_.find(agent_id);
    if (it == agents_.end()) {
      return absl::NotFoundError(absl::StrCat("agent_id: unknown agent '", agent_id.substr(0, 64), "'; register again"));
    }
    it->second.last_seen = std::chrono::steady_clock::now();
    if (!it->second.orders.empty() || stopping_ ||
        cv_.wait_until(l, deadline) == std::cv_status::timeout) {
      break;
    }
  }
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return absl::NotFoundError(absl::StrCat("agent_id: unknown agent '", agent_id, "'"));
  v1::PollOrdersResponse resp;
  bool changed = false;
  while (!it->second.orders.empty()) {
    v1::Order o = std::move(it->second.orders.front());
    it->second.orders.pop_front();
    if (o.has_launch()) {
      auto id = ParseJobId(o.launch().job_id());
      auto lj = id.ok() ? live_.find(*id) : live_.end();
      if (lj != live_.end() && lj->second.awaiting_launch.erase(agent_id) && lj->second.awaiting_launch.empty()) {
        auto r = store_->Update(*id, [](store::JobRecord& j) { j.state = v1::RUNNING; }, "all ranks launched");
        changed = changed || r.ok();
      }
    }
    *resp.add_orders() = std::move(o);
  }
  if (changed) NotifyLocked();
  return resp;
}

absl::Status Coordinator::ReportExit(const v1::ReportExitRequest& req) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(req.job_id()));
  std::lock_guard<std::mutex> l(mu_);
  if (agents_.find(req.agent_id()) == agents_.end()) {
    return absl::NotFoundError(absl::StrCat("agent_id: unknown agent '", req.agent_id().substr(0, 64), "'"));
  }
  auto r = store_->GetJob(id);
  if (!r.ok()) return r.status().code() == absl::StatusCode::kNotFound ? absl::NotFoundError(req.job_id() + " not found")
                                                                      : r.status();
  if (req.rank() < 0 || req.rank() >= r->world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank: must be in [0, ", r->world_size, "), got ", req.rank()));
  }
  // Reports for finished jobs or earlier attempts are stale: accepted, ignored.
  if (store::IsTerminal(r->state) || req.attempt() != r->restart_count || !live_.count(id)) return absl::OkStatus();
  if (!PlacedOnLocked(id, req.rank(), req.agent_id())) {
    return RefuseLocked("ReportExit", req.agent_id(),
                        absl::StrCat("rank: ", req.job_id(), " rank ", req.rank(), " is not placed on this agent"));
  }
  LiveJob& live = live_[id];
  live.exits[req.rank()] = req.exit_code();
  if (req.exit_code() != 0) {
    std::string why = req.error().empty() ? absl::StrCat("rank ", req.rank(), " exited with ", req.exit_code())
                                          : req.error().substr(0, 4096);
    RestartOrFailLocked(*r, req.rank(), req.exit_code(), why);
  } else if (static_cast<int32_t>(live.exits.size()) == r->world_size) {
    std::vector<int32_t> codes(r->world_size, 0);
    FinishLocked(id, [&](store::JobRecord& j) {
      j.state = v1::SUCCEEDED;
      j.exit_codes = codes;
    }, "all ranks exited 0");
  }
  NotifyLocked();
  return absl::OkStatus();
}

absl::StatusOr<store::JobRecord> Coordinator::ReportedJobLocked(const std::string& agent_id, int64_t id,
                                                              const std::string& job_id) {
  auto a = agents_.find(agent_id);
  if (a == agents_.end()) {
    return absl::NotFoundError(absl::StrCat("agent_id: unknown agent '", agent_id.substr(0, 64), "'"));
  }
  a->second.last_seen = std::chrono::steady_clock::now();
  auto r = store_->GetJob(id);
  if (!r.ok() && r.status().code() == absl::StatusCode::kNotFound) return absl::NotFoundError(job_id + " not found");
  return r;
}

absl::Status Coordinator::ReportProgress(const v1::ReportProgressRequest& req) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(req.job_id()));
  if (req.rendezvous_address().size() > 256) {
    return absl::InvalidArgumentError("rendezvous_address: longer than 256 bytes");
  }
  std::lock_guard<std::mutex> l(mu_);
  auto r = ReportedJobLocked(req.agent_id(), id, req.job_id());
  if (!r.ok()) return r.status();
  auto live = live_.find(id);
  if (store::IsTerminal(r->state) || req.attempt() != r->restart_count || live == live_.end()) return absl::OkStatus();
  if (!PlacedOnLocked(id, 0, req.agent_id())) {
    return RefuseLocked("ReportProgress", req.agent_id(),
                        absl::StrCat("job_id: rank 0 of ", req.job_id(), " is not placed on this agent"));
  }
  if (!req.rendezvous_address().empty()) live->second.rendezvous_address = req.rendezvous_address();
  if (m_steps_ != nullptr && req.step() > r->current_step)
    m_steps_->With({}).Inc(static_cast<double>(req.step() - std::max<int64_t>(0, r->current_step)));
  if (req.step() > r->current_step || req.checkpoint_step() > r->last_checkpoint_step) {
    LOOM_RETURN_IF_ERROR(store_->UpdateProgress(id, req.step(), req.checkpoint_step()));
  }
  NotifyLocked();
  return absl::OkStatus();
}

absl::Status Coordinator::AppendLogs(const v1::AppendLogsRequest& req) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(req.job_id()));
  if (req.stream() != "stdout" && req.stream() != "stderr") {
    return absl::InvalidArgumentError(absl::StrCat("stream: expected stdout or stderr, got '", req.stream().substr(0, 32), "'"));
  }
  if (req.offset() < 0) return absl::InvalidArgumentError(absl::StrCat("offset: must be >= 0, got ", req.offset()));
  if (req.data().size() > (1 << 20)) return absl::InvalidArgumentError("data: more than 1 MiB");
  auto r = store_->GetJob(id);
  if (!r.ok()) return r.status().code() == absl::StatusCode::kNotFound ? absl::NotFoundError(req.job_id() + " not found")
                                                                      : r.status();
  if (req.rank() < 0 || req.rank() >= r->world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank: must be in [0, ", r->world_size, "), got ", req.rank()));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (agents_.find(req.agent_id()) == agents_.end()) {
      return absl::NotFoundError(absl::StrCat("agent_id: unknown agent '", req.agent_id().substr(0, 64), "'"));
    }
    auto job = rank_owners_.find(id);
    bool ran = false;
    if (job != rank_owners_.end()) {
      auto rank = job->second.find(req.rank());
      ran = rank != job->second.end() && rank->second.count(req.agent_id()) > 0;
    }
    if (!ran) {
      return RefuseLocked("AppendLogs", req.agent_id(),
                          absl::StrCat("rank: ", req.job_id(), " rank ", req.rank(), " never ran on this agent"));
    }
  }
  std::string dir = absl::StrCat(opts_.data_dir, "/logs/", FormatJobId(id));
  std::string path = absl::StrCat(dir, "/rank", req.rank(), ".", req.stream() == "stdout" ? "out" : "err");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  bool fresh = !std::filesystem::exists(path, ec);
  FILE* f = std::fopen(path.c_str(), fresh ? "w+b" : "r+b");
  if (f == nullptr) return absl::InternalError(absl::StrCat("logs: cannot open ", path));
  bool ok = std::fseek(f, static_cast<long>(req.offset()), SEEK_SET) == 0 &&
            std::fwrite(req.data().data(), 1, req.data().size(), f) == req.data().size();
  std::fclose(f);
  if (!ok) return absl::InternalError(absl::StrCat("logs: cannot write ", path));
  if (fresh) LOOM_RETURN_IF_ERROR(store_->AddLog({id, req.rank(), req.stream(), path}));
  std::lock_guard<std::mutex> l(mu_);
  ++version_;  // wakes `logs --follow` (no job state changed)
  cv_.notify_all();
  return absl::OkStatus();
}

void Coordinator::CheckAgents() {
  std::lock_guard<std::mutex> l(mu_);
  auto now = std::chrono::steady_clock::now();
  const auto interval = std::chrono::milliseconds(opts_.heartbeat_interval_ms);
  if (last_check_ != std::chrono::steady_clock::time_point{} && now - last_check_ > 2 * interval) {
    // The coordinator itself was stalled: its agents may have called and not
    // been heard, and reloaded jobs' agents may not have reclaimed yet.
    responsive_since_ = now;
    if (reclaim_deadline_ != std::chrono::steady_clock::time_point::max()) {
      reclaim_deadline_ = std::max(reclaim_deadline_, now + 3 * interval);
    }
  }
  last_check_ = now;
  std::vector<std::string> lost;
  {
    std::lock_guard<std::mutex> h(heard_mu_);
    for (const auto& [id, a] : agents_) {
      auto heard = heard_.find(id);
      auto seen = std::max(a.last_seen, responsive_since_);
      if (heard != heard_.end()) seen = std::max(seen, heard->second);
      if (now - seen > 3 * interval) lost.push_back(id);
    }
  }
  if (!unclaimed_.empty() && now > reclaim_deadline_) {
    // Reloaded jobs whose ranks were not all reclaimed: stop what was adopted
    // and restart the group (re-queued) within its budget.
    std::set<int64_t> jobs;
    jobs.swap(unclaimed_);
    for (int64_t job : jobs) {
      auto r = store_->GetJob(job);
      if (!r.ok() || store::IsTerminal(r->state)) continue;
      if (r->state == v1::SCHEDULED && sched_.Placement(job) == nullptr) {
        // Never launched anywhere: back in the queue, no restart counted.
        auto p = store_->Update(
            job, [](store::JobRecord& j) { j.state = v1::PENDING; }, "launch orders lost in a coordinator restart");
        if (p.ok()) sched_.Enqueue(job, r->priority, job, live_[job].demand);
        continue;
      }
      RestartOrFailLocked(*r, -1, -1, "ranks not reclaimed after a coordinator restart");
    }
    RunScheduleLocked();
    NotifyLocked();
  }
  if (lost.empty()) return;
  for (const std::string& id : lost) {
    std::fprintf(stderr, "loom coordinator: agent %s lost: silent for 3 heartbeat intervals (%d ms)\n", id.c_str(),
                 3 * opts_.heartbeat_interval_ms);
    RememberLostLocked(id);
    agents_.erase(id);
    std::map<int64_t, std::vector<Slot>> before;
    for (const auto& [job, live] : live_) {
      if (const auto* slots = sched_.Placement(job)) before[job] = *slots;
    }
    for (int64_t job : sched_.RemoveAgent(id)) {
      KillLocked(job, before[job]);  // the ranks on surviving agents
      auto r = store_->GetJob(job);
      if (!r.ok() || store::IsTerminal(r->state)) continue;
      // Its placement is gone: restart (re-queued, placed on what remains)
      // or fail, within the job's budget.
      RestartOrFailLocked(*r, -1, -1, absl::StrCat("agent ", id, " lost (3 missed heartbeats)"));
    }
  }
  RunScheduleLocked();
  NotifyLocked();
}

void Coordinator::RememberLostLocked(const std::string& id) {
  constexpr size_t kKeptLostAgents = 256;
  auto it = agents_.find(id);
  if (it == agents_.end()) return;
  AgentInfo& kept = lost_agents_[id];
  kept = it->second;
  kept.orders.clear();
  while (lost_agents_.size() > kKeptLostAgents) {
    auto oldest = std::min_element(lost_agents_.begin(), lost_agents_.end(), [](const auto& a, const auto& b) {
      return a.second.last_seen < b.second.last_seen;
    });
    lost_agents_.erase(oldest);
  }
}

absl::Status Coordinator::ReportMetrics(const v1::ReportMetricsRequest& req) {
  constexpr int kMaxPoints = 1000;
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(req.job_id()));
  if (req.points_size() > kMaxPoints) {
    return absl::InvalidArgumentError(absl::StrCat("points: at most ", kMaxPoints, " a call, got ", req.points_size()));
  }
  std::lock_guard<std::mutex> l(mu_);
  auto r = ReportedJobLocked(req.agent_id(), id, req.job_id());
  if (!r.ok()) return r.status();
  if (store::IsTerminal(r->state) || req.attempt() != r->restart_count || live_.count(id) == 0) return absl::OkStatus();
  for (const v1::MetricPoint& p : req.points()) {
    if (p.rank() < 0 || p.rank() >= r->world_size) {
      return absl::InvalidArgumentError(absl::StrCat("points.rank: must be in [0, ", r->world_size, "), got ", p.rank()));
    }
    if (!PlacedOnLocked(id, p.rank(), req.agent_id())) {
      return RefuseLocked("ReportMetrics", req.agent_id(),
                          absl::StrCat("points.rank: rank ", p.rank(), " of ", req.job_id(), " is not placed on this agent"));
    }
  }
  for (const v1::MetricPoint& p : req.points()) metrics_.Add(id, p);
  NotifyLocked();
  return absl::OkStatus();
}

}  // namespace loom::runtime::service
