// The dashboard's JSON API under /api/v1/ (docs/dashboard.md), over the
// coordinator's own views: the same Coordinator calls as JobService.
//
//   GET  /api/v1/whoami                      {"name"}
//   GET  /api/v1/jobs?state=&page_size=&page_token=
//   GET  /api/v1/jobs/<id>                   JobSummary + spec, history, ranks, ...
//   GET  /api/v1/jobs/<id>/metrics?after_step=
//   GET  /api/v1/jobs/<id>/logs?rank=&after=&limit=
//   GET  /api/v1/jobs/<id>/events            text/event-stream (api_events.cc)
//   POST /api/v1/jobs/<id>/cancel            {"state"}; GET is 405
//   GET  /api/v1/agents
//
// Every call needs `Authorization: Bearer <token>` with a user token of
// `tokens` (401 with WWW-Authenticate: Bearer otherwise); a `token` query
// parameter is refused (400): tokens never travel in URLs. Errors are
// {"error": "..."} with the HTTP status of the coordinator's code
// (INVALID_ARGUMENT 400, NOT_FOUND 404, FAILED_PRECONDITION 409, ...).
#pragma once

#include <httplib.h>

#include <string>

#include "absl/status/status.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/coordinator.h"

namespace loom::runtime::service::dashboard {

// Adds the API routes. `coordinator` and `tokens` must outlive the server.
void AddApiRoutes(httplib::Server& server, Coordinator* coordinator, const auth::TokenSet* tokens);

namespace internal {

inline constexpr char kJsonType[] = "application/json; charset=utf-8";
int HttpStatusOf(const absl::Status& s);
void SendError(httplib::Response& res, int status, const std::string& message);
void SendStatus(httplib::Response& res, const absl::Status& s);
// GET /api/v1/jobs/<id>/events: the streamed response.
void ServeEvents(Coordinator* c, const httplib::Request& req, httplib::Response& res);
// GET /api/v1/jobs/<id>/logs.
void ServeLogs(Coordinator* c, const httplib::Request& req, httplib::Response& res);

}  // namespace internal
}  // namespace loom::runtime::service::dashboard
