// The coordinator's read-side views for dashboards and JobService: job
// history, agents, metric series and log reads. The job lifecycle is in
// coordinator.cc, the agents' calls in coordinator_nodes.cc.
#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/service/coordinator.h"

namespace loom::runtime::service {
namespace {

constexpr int64_t kLogChunkBytes = 64 * 1024;

int64_t UnixMsOf(std::chrono::steady_clock::time_point t) {
  auto ago = std::chrono::steady_clock::now() - t;
  auto wall = std::chrono::system_clock::now() - ago;
  return std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count();
}

}  // namespace

absl::StatusOr<std::vector<store::JobEventRecord>> Coordinator::History(const std::string& job_id) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  auto r = store_->GetJob(id);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kNotFound) return absl::NotFoundError(job_id + " not found");
    return r.status();
  }
  return store_->Events(id);
}

v1::ListAgentsResponse Coordinator::ListAgents() {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, std::vector<v1::AgentRank>> running;
  for (const auto& [job, live] : live_) {
    const auto* slots = sched_.Placement(job);
    if (slots == nullptr) continue;
    for (const Slot& s : *slots) {
      v1::AgentRank ar;
      ar.set_job_id(FormatJobId(job));
      ar.set_rank(s.rank);
      running[s.agent_id].push_back(std::move(ar));
    }
  }
  std::map<std::string, v1::AgentStatus> out;
  auto add = [&](const std::string& id, const AgentInfo& a, const char* state) {
    v1::AgentStatus& s = out[id];
    s.set_agent_id(id);
    s.set_hostname(a.hostname);
    s.set_state(state);
    *s.mutable_resources() = a.resources;
    s.set_last_heartbeat_unix_ms(UnixMsOf(a.last_seen));
    for (const v1::AgentRank& ar : running[id]) *s.add_running() = ar;
  };
  for (const auto& [id, a] : lost_agents_) add(id, a, "lost");
  for (const auto& [id, a] : agents_) add(id, a, "alive");
  v1::ListAgentsResponse resp;
  for (auto& [id, s] : out) *resp.add_agents() = std::move(s);
  return resp;
}

absl::StatusOr<std::vector<v1::MetricPoint>> Coordinator::Metrics(const std::string& job_id, int64_t after_step) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  auto r = store_->GetJob(id);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kNotFound) return absl::NotFoundError(job_id + " not found");
    return r.status();
  }
  std::lock_guard<std::mutex> l(mu_);
  return metrics_.After(id, after_step);
}

std::vector<v1::MetricPoint> Coordinator::MetricsAfterSeq(int64_t job, uint64_t* seq) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<v1::MetricPoint> out;
  for (JobMetrics::Point& p : metrics_.PointsAfterSeq(job, *seq)) {
    *seq = std::max(*seq, p.seq);
    out.push_back(std::move(p.point));
  }
  return out;
}

absl::StatusOr<std::vector<v1::LogChunk>> Coordinator::ReadLogs(const std::string& job_id, int32_t rank,
                                                                std::map<std::string, int64_t>* offsets,
                                                                int64_t max_bytes) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  LOOM_ASSIGN_OR_RETURN(std::vector<store::LogRecord> logs, store_->Logs(id));
  std::vector<v1::LogChunk> out;
  int64_t left = max_bytes;
  std::string buf;
  for (const store::LogRecord& lr : logs) {
    if (rank >= 0 && lr.rank != rank) continue;
    std::ifstream in(lr.path, std::ios::binary);
    if (!in) continue;
    int64_t& off = (*offsets)[absl::StrCat(lr.rank, ".", lr.stream)];
    in.seekg(off);
    while (left > 0) {
      buf.resize(static_cast<size_t>(std::min(left, kLogChunkBytes)));
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const int64_t n = in.gcount();
      if (n <= 0) break;
      v1::LogChunk& chunk = out.emplace_back();
      chunk.set_rank(lr.rank);
      chunk.set_stream(lr.stream);
      chunk.set_data(buf.data(), static_cast<size_t>(n));
      off += n;
      left -= n;
    }
  }
  return out;
}

}  // namespace loom::runtime::service
