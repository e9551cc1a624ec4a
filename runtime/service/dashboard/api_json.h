// JSON forms of the coordinator's views for the dashboard API (api.h). Every
// string goes through nlohmann-json's encoder (quotes, backslashes and
// control characters escaped; invalid UTF-8 replaced by U+FFFD on dump).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "proto/loom/v1/service.pb.h"
#include "runtime/service/store/job_store.h"

namespace loom::runtime::service::dashboard {

using Json = nlohmann::json;

// Milliseconds since the epoch as RFC 3339 UTC ("2026-12-05T01:02:03.456Z");
// null for 0.
Json Rfc3339(int64_t unix_ms);
// The JobSummary of the API contract.
Json JobSummary(const v1::JobStatus& s);
// One metrics point: step, loss, val_loss, lr, tokens_per_s, step_time_ms, rank, at.
Json PointJson(const v1::MetricPoint& p);
// The job's state history: [{"state", "at", "reason"}].
Json HistoryJson(const std::vector<store::JobEventRecord>& events);
// The per-rank table of a job: rank, host, agent_id, step, exit_code, root_cause, state.
Json RanksJson(const v1::JobStatus& s, const v1::ListAgentsResponse& agents,
               const std::vector<v1::MetricPoint>& points);
// {"agents": [...]} of the API contract.
Json AgentsJson(const v1::ListAgentsResponse& agents);
// Serialises for the wire (invalid UTF-8 replaced, never thrown).
std::string Dump(const Json& j);

}  // namespace loom::runtime::service::dashboard
