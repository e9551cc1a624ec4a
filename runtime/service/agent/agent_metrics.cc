// The agent's metrics thread: each rank appends one JSON object per step to
// its LOOM_METRICS_FILE ({"step", "loss", "lr", "tokens_per_s",
// "step_time_ms"} or {"step", "val_loss"}); every kMetricsPollMs the thread
// sends the new complete lines to the coordinator (NodeService.ReportMetrics),
// so a point reaches it about kMetricsPollMs after the worker writes it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "nlohmann/json.hpp"
#include "runtime/service/agent/agent.h"
#include "runtime/service/auth/token.h"

namespace loom::runtime::service::agent {
namespace {

constexpr int kMetricsPollMs = 100;
constexpr int kMaxPointsPerCall = 1000;  // NodeService's bound
constexpr size_t kMaxLineBytes = 4096;

// One line of a metrics file; false when it is not a JSON object with a step.
bool ParsePoint(const std::string& line, int32_t rank, v1::MetricPoint* p) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return false;
  p->set_step(j["step"].get<int64_t>());
  p->set_rank(rank);
  auto number = [&](const char* key, void (v1::MetricPoint::*set)(double)) {
    if (j.contains(key) && j[key].is_number()) (p->*set)(j[key].get<double>());
  };
  number("loss", &v1::MetricPoint::set_loss);
  number("val_loss", &v1::MetricPoint::set_val_loss);
  number("lr", &v1::MetricPoint::set_lr);
  number("tokens_per_s", &v1::MetricPoint::set_tokens_per_s);
  number("step_time_ms", &v1::MetricPoint::set_step_time_ms);
  p->set_time_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count());
  return true;
}

}  // namespace

void Agent::MetricsLoop() {
  while (!stop_) {
    ShipMetrics();
    std::this_thread::sleep_for(std::chrono::milliseconds(kMetricsPollMs));
  }
}

void Agent::ShipMetrics() {
  std::lock_guard<std::mutex> ship(ship_mu_);
  std::map<std::string, MetricFile> files;
  std::string agent_id, bearer;
  {
    std::lock_guard<std::mutex> l(mu_);
    files = metric_files_;
    agent_id = agent_id_;
    bearer = secret_.empty() ? "" : auth::AgentBearer(agent_id_, secret_);
  }
  if (bearer.empty()) return;
  for (const auto& [path, f] : files) {
    std::ifstream in(path, std::ios::binary);
    int64_t shipped = f.shipped;
    v1::ReportMetricsRequest req;
    req.set_agent_id(agent_id);
    req.set_job_id(f.job_id);
    req.set_attempt(f.attempt);
    if (in) {
      in.seekg(shipped);
      std::string line;
      while (req.points_size() < kMaxPointsPerCall && std::getline(in, line) && !in.eof()) {
        shipped += static_cast<int64_t>(line.size()) + 1;  // complete lines only (ended by '\n')
        v1::MetricPoint p;
        if (line.size() <= kMaxLineBytes && ParsePoint(line, f.rank, &p)) *req.add_points() = std::move(p);
      }
    }
    bool drop = false;
    if (req.points_size() > 0) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      auth::AddBearer(&ctx, bearer);
      v1::ReportMetricsResponse resp;
      grpc::Status s = stub_->ReportMetrics(&ctx, req, &resp);
      if (!s.ok() && s.error_code() != grpc::StatusCode::PERMISSION_DENIED) continue;  // retried next round
      drop = s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
    }
    std::lock_guard<std::mutex> l(mu_);
    auto it = metric_files_.find(path);
    if (it == metric_files_.end()) continue;
    it->second.shipped = shipped;
    // Kept while a rank of that attempt runs here; afterwards until drained.
    bool running = false;
    for (const auto& [pid, proc] : procs_) running |= proc.job_id == f.job_id && proc.attempt == f.attempt;
    if (drop || (!running && shipped == f.shipped)) metric_files_.erase(it);
  }
}

}  // namespace loom::runtime::service::agent
