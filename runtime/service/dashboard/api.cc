#include "runtime/service/dashboard/api.h"

#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/service/dashboard/api_json.h"

namespace loom::runtime::service::dashboard {
namespace internal {

int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

void SendError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(Dump(Json{{"error", message}}), kJsonType);
}

void SendStatus(httplib::Response& res, const absl::Status& s) { SendError(res, HttpStatusOf(s), std::string(s.message())); }

}  // namespace internal
namespace {

using internal::kJsonType;
using internal::SendError;
using internal::SendStatus;
using Handler = std::function<void(const httplib::Request&, httplib::Response&, const std::string& who)>;

constexpr int kMaxPageSize = 500;
constexpr int kDefaultPageSize = 50;

void SendJson(httplib::Response& res, const Json& j) { res.set_content(Dump(j), kJsonType); }

// The token check every API route goes through: `Authorization: Bearer`,
// never a token in the URL.
httplib::Server::Handler Guard(const auth::TokenSet* tokens, Handler h) {
  return [tokens, h](const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("token") || req.has_param("access_token")) {
      return SendError(res, 400, "tokens are never accepted in the URL; send Authorization: Bearer <token>");
    }
    const std::string auth = req.get_header_value("Authorization");
    constexpr char kPrefix[] = "Bearer ";
    std::string name;
    if (auth.size() > sizeof kPrefix - 1 && absl::EqualsIgnoreCase(auth.substr(0, sizeof kPrefix - 1), kPrefix)) {
      name = tokens->NameOf(auth.substr(sizeof kPrefix - 1));
    }
    if (name.empty()) {
      res.set_header("WWW-Authenticate", "Bearer");
      return SendError(res, 401, auth.empty() ? "missing Authorization: Bearer <token>" : "wrong bearer token");
    }
    h(req, res, name);
  };
}

void ListJobs(Coordinator* c, const httplib::Request& req, httplib::Response& res) {
  v1::ListJobsRequest lr;
  lr.set_newest_first(true);
  int page_size = kDefaultPageSize;
  if (req.has_param("page_size")) {
    const std::string v = req.get_param_value("page_size");
    if (!absl::SimpleAtoi(v, &page_size) || page_size < 1 || page_size > kMaxPageSize) {
      return SendError(res, 400, absl::StrCat("page_size: must be in [1, ", kMaxPageSize, "]"));
    }
  }
  lr.set_page_size(page_size);
  if (req.has_param("state") && !req.get_param_value("state").empty()) {
    v1::JobState st;
    if (!v1::JobState_Parse(req.get_param_value("state"), &st) || st == v1::JOB_STATE_UNSPECIFIED) {
      return SendError(res, 400, "state: expected one of PENDING, SCHEDULED, RUNNING, RESTARTING, SUCCEEDED, FAILED, "
                                 "CANCELLED");
    }
    lr.add_states(st);
  }
  lr.set_page_token(req.get_param_value("page_token"));
  auto r = c->List(lr);
  if (!r.ok()) return SendStatus(res, r.status());
  Json jobs = Json::array();
  for (const v1::JobStatus& s : r->jobs()) jobs.push_back(JobSummary(s));
  SendJson(res, Json{{"jobs", jobs}, {"next_page_token", r->next_page_token()}, {"total", r->total_size()}});
}

void GetJob(Coordinator* c, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  auto job = c->Get(id);
  if (!job.ok()) return SendStatus(res, job.status());
  auto history = c->History(id);
  if (!history.ok()) return SendStatus(res, history.status());
  auto points = c->Metrics(id, -1);
  if (!points.ok()) return SendStatus(res, points.status());
  Json j = JobSummary(job->job());
  j["spec"] = jobspec::ToYaml(job->spec());
  j["history"] = HistoryJson(*history);
  j["wait_reason"] = job->job().wait_reason();
  j["root_cause"] = job->job().root_cause();
  j["ranks"] = RanksJson(job->job(), c->ListAgents(), *points);
  SendJson(res, j);
}

void GetMetrics(Coordinator* c, const httplib::Request& req, httplib::Response& res) {
  int64_t after = -1;
  if (req.has_param("after_step") && !absl::SimpleAtoi(req.get_param_value("after_step"), &after)) {
    return SendError(res, 400, "after_step: expected an integer");
  }
  auto points = c->Metrics(req.matches[1], after);
  if (!points.ok()) return SendStatus(res, points.status());
  Json list = Json::array();
  for (const v1::MetricPoint& p : *points) list.push_back(PointJson(p));
  SendJson(res, Json{{"points", list}});
}

void CancelJob(Coordinator* c, const httplib::Request& req, httplib::Response& res) {
  auto r = c->Cancel(req.matches[1]);
  if (!r.ok()) return SendStatus(res, r.status());
  SendJson(res, Json{{"state", v1::JobState_Name(r->state())}});
}

}  // namespace

void AddApiRoutes(httplib::Server& server, Coordinator* c, const auth::TokenSet* tokens) {
  auto route = [&](Handler h) { return Guard(tokens, std::move(h)); };
  const std::string job = "/api/v1/jobs/([^/]+)";
  server.Get("/api/v1/whoami", route([](const httplib::Request&, httplib::Response& res, const std::string& who) {
    SendJson(res, Json{{"name", who}});
  }));
  server.Get("/api/v1/jobs", route([c](auto& req, auto& res, auto&) { ListJobs(c, req, res); }));
  server.Get(job, route([c](auto& req, auto& res, auto&) { GetJob(c, req, res); }));
  server.Get(job + "/metrics", route([c](auto& req, auto& res, auto&) { GetMetrics(c, req, res); }));
  server.Get(job + "/logs", route([c](auto& req, auto& res, auto&) { internal::ServeLogs(c, req, res); }));
  server.Get(job + "/events", route([c](auto& req, auto& res, auto&) { internal::ServeEvents(c, req, res); }));
  server.Post(job + "/cancel", route([c](auto& req, auto& res, auto&) { CancelJob(c, req, res); }));
  server.Get(job + "/cancel", route([](auto&, auto& res, auto&) {
    res.set_header("Allow", "POST");
    SendError(res, 405, "cancel is a POST");
  }));
  server.Get("/api/v1/agents", route([c](auto&, auto& res, auto&) { SendJson(res, AgentsJson(c->ListAgents())); }));
  auto unknown = route([](auto&, auto& res, auto&) { SendError(res, 404, "no such API path"); });
  server.Get("/api/.*", unknown);
  server.Post("/api/.*", unknown);
}

}  // namespace loom::runtime::service::dashboard
