// The dashboard API against a real coordinator server (gRPC + HTTP on
// loopback), with agents played through NodeService as in server_test.cc.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/service/server_test_fixture.h"

namespace loom::runtime::service {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char kHostile[] = "<img src=x onerror=alert(1)> \"quoted\" \\back</script>\x01";

class ApiTest : public ServerTest {
 protected:
  void SetUp() override {
    metrics_port_ = 0;
    StartServer(1000);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->metrics_port());
    http_->set_read_timeout(10, 0);
  }

  httplib::Headers Auth(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }
  httplib::Headers Auth() { return Auth(server_->token()); }

  Json GetJson(const std::string& path, int want_status = 200) {
    auto r = http_->Get(path.c_str(), Auth());
    EXPECT_TRUE(r) << path;
    if (!r) return Json();
    EXPECT_EQ(r->status, want_status) << path << ": " << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json; charset=utf-8") << path;
    return Json::parse(r->body);
  }

  // A running one-rank job on a fresh agent: {agent id, job id}.
  std::pair<std::string, std::string> RunningJob(const std::string& name) {
    std::string agent = Register(1, "host-" + name);
    v1::SubmitJobResponse resp;
    EXPECT_TRUE(Submit(Spec(name), "", &resp).ok());
    Poll(agent);
    return {agent, resp.job().job_id()};
  }

  grpc::Status ReportMetric(const std::string& agent, const std::string& job, int64_t step, double loss,
                            int rank = 0) {
    v1::ReportMetricsRequest req;
    req.set_agent_id(agent);
    req.set_job_id(job);
    v1::MetricPoint* p = req.add_points();
    p->set_step(step);
    p->set_rank(rank);
    p->set_loss(loss);
    p->set_lr(1e-3);
    p->set_time_unix_ms(1700000000000 + step);
    v1::ReportMetricsResponse resp;
    return nodes_->ReportMetrics(AgentCtx(agent).get(), req, &resp);
  }

  std::unique_ptr<httplib::Client> http_;
};

// Every API route, with and without a valid bearer token.
TEST_F(ApiTest, EveryEndpointNeedsTheToken) {
  auto [agent, job] = RunningJob("auth");
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"GET", "/api/v1/whoami"},           {"GET", "/api/v1/jobs"},
      {"GET", "/api/v1/jobs?state=RUNNING"}, {"GET", "/api/v1/jobs/" + job},
      {"GET", "/api/v1/jobs/" + job + "/metrics?after_step=-1"},
      {"GET", "/api/v1/jobs/" + job + "/logs"}, {"GET", "/api/v1/jobs/" + job + "/events"},
      {"GET", "/api/v1/agents"},           {"POST", "/api/v1/jobs/" + job + "/cancel"},
      {"GET", "/api/v1/jobs/job-999999"},  {"GET", "/api/v1/nothing"},
  };
  for (const auto& [method, path] : routes) {
    for (const httplib::Headers& h : {httplib::Headers{}, Auth("wrong-token"), Auth(""),
                                      httplib::Headers{{"Authorization", server_->token()}},
                                      Auth(server_->join_token())}) {
      auto r = method == "GET" ? http_->Get(path.c_str(), h) : http_->Post(path.c_str(), h, "", "text/plain");
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 401) << method << " " << path;
      EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer") << path;
      EXPECT_TRUE(Json::parse(r->body).contains("error")) << r->body;
    }
    // The right token in the URL is refused too.
    const std::string in_url = path + (path.find('?') == std::string::npos ? "?" : "&") + "token=" + server_->token();
    auto r = method == "GET" ? http_->Get(in_url.c_str()) : http_->Post(in_url.c_str(), "", "text/plain");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->status == 400 || r->status == 401) << in_url << " -> " << r->status;
  }
  EXPECT_EQ(Get(job).state(), v1::RUNNING) << "no refused call cancelled the job";
  // With the token: the job answers, an unknown job is 404.
  EXPECT_EQ(GetJson("/api/v1/whoami")["name"], "default");
  EXPECT_EQ(GetJson("/api/v1/jobs/" + job)["id"], job);
  EXPECT_EQ(GetJson("/api/v1/jobs/job-999999", 404)["error"], "job-999999 not found");
  EXPECT_EQ(GetJson("/api/v1/jobs/bogus", 400)["error"].get<std::string>().rfind("job_id:", 0), 0u);
  GetJson("/api/v1/nothing", 404);
  auto lower = http_->Get("/api/v1/whoami", httplib::Headers{{"Authorization", "bearer " + server_->token()}});
  EXPECT_EQ(lower->status, 200) << "the scheme is case-insensitive";
  auto api = http_->Get("/api/v1/jobs", Auth());
  EXPECT_EQ(api->get_header_value("Cache-Control"), "no-store");
  EXPECT_FALSE(api->get_header_value("Content-Security-Policy").empty());
}

TEST_F(ApiTest, CancelIsPostOnly) {
  auto [agent, job] = RunningJob("cancel");
  const std::string path = "/api/v1/jobs/" + job + "/cancel";
  auto get = http_->Get(path.c_str(), Auth());
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  auto post = http_->Post(path.c_str(), Auth(), "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200) << post->body;
  EXPECT_EQ(Json::parse(post->body)["state"], "CANCELLED");
  EXPECT_EQ(Get(job).state(), v1::CANCELLED);
  auto again = http_->Post(path.c_str(), Auth(), "", "text/plain");
  EXPECT_EQ(again->status, 409) << "a finished job: " << again->body;
}

// Strings a job controls come back as the same data, whatever they hold.
TEST_F(ApiTest, HostileStringsRoundTripAsData) {
  auto [agent, job] = RunningJob("hostile");
  v1::AppendLogsRequest logs;
  logs.set_agent_id(agent);
  logs.set_job_id(job);
  logs.set_rank(0);
  logs.set_stream("stdout");
  logs.set_data(std::string("first line\n") + kHostile + "\xff\n");
  v1::AppendLogsResponse lr;
  ASSERT_TRUE(nodes_->AppendLogs(AgentCtx(agent).get(), logs, &lr).ok());
  v1::ReportExitRequest exit;
  exit.set_agent_id(agent);
  exit.set_job_id(job);
  exit.set_exit_code(2);
  exit.set_error(kHostile);
  v1::ReportExitResponse er;
  ASSERT_TRUE(nodes_->ReportExit(AgentCtx(agent).get(), exit, &er).ok());
  ASSERT_EQ(Get(job).state(), v1::FAILED);

  const std::string expected = kHostile;
  Json detail = GetJson("/api/v1/jobs/" + job);
  EXPECT_EQ(detail["root_cause"], expected);
  ASSERT_EQ(detail["ranks"].size(), 1u);
  EXPECT_EQ(detail["ranks"][0]["root_cause"], expected);
  EXPECT_EQ(detail["ranks"][0]["exit_code"], 2);
  Json lines = GetJson("/api/v1/jobs/" + job + "/logs?rank=0")["lines"];
  ASSERT_EQ(lines.size(), 2u) << lines.dump();
  EXPECT_EQ(lines[0]["text"], "first line");
  // Invalid UTF-8 in a log line (\xff) becomes U+FFFD; the rest is the same bytes.
  EXPECT_EQ(lines[1]["text"], expected + "\xef\xbf\xbd");
  EXPECT_EQ(lines[1]["stream"], "stdout");
  // On the wire: quotes, backslashes and control bytes escaped.
  auto raw = http_->Get(("/api/v1/jobs/" + job).c_str(), Auth());
  EXPECT_NE(raw->body.find("\\\"quoted\\\" \\\\back"), std::string::npos) << raw->body;
  EXPECT_NE(raw->body.find("\\u0001"), std::string::npos);
}

TEST_F(ApiTest, JobDetailHistoryAndSpec) {
  auto [agent, job] = RunningJob("detail");
  Json d = GetJson("/api/v1/jobs/" + job);
  EXPECT_EQ(d["name"], "detail");
  EXPECT_EQ(d["state"], "RUNNING");
  EXPECT_EQ(d["submitter"], "default");
  EXPECT_EQ(d["attempt"], 1);
  EXPECT_EQ(d["restarts"], 0);
  EXPECT_TRUE(d["loss"].is_null());
  EXPECT_NE(d["spec"].get<std::string>().find("detail"), std::string::npos);
  ASSERT_GE(d["history"].size(), 2u);
  EXPECT_EQ(d["history"][0]["state"], "PENDING");
  EXPECT_EQ(d["history"][0]["reason"], "submitted");
  EXPECT_EQ(d["created_at"].get<std::string>().size(), 24u) << d["created_at"];
  EXPECT_EQ(d["created_at"].get<std::string>().back(), 'Z');
  ASSERT_EQ(d["ranks"].size(), 1u);
  EXPECT_EQ(d["ranks"][0]["agent_id"], agent);
  EXPECT_EQ(d["ranks"][0]["host"], "host-detail");
}

TEST_F(ApiTest, MetricsAfterStepAndRefusedRanks) {
  auto [agent, job] = RunningJob("metrics");
  for (int s = 1; s <= 5; ++s) ASSERT_TRUE(ReportMetric(agent, job, s, 10.0 - s).ok());
  Json pts = GetJson("/api/v1/jobs/" + job + "/metrics?after_step=2")["points"];
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0]["step"], 3);
  EXPECT_EQ(pts[0]["loss"], 7.0);
  EXPECT_EQ(pts[0]["lr"], 1e-3);
  EXPECT_TRUE(pts[0]["val_loss"].is_null());
  EXPECT_TRUE(pts[0]["tokens_per_s"].is_null());
  EXPECT_EQ(GetJson("/api/v1/jobs/" + job + "/metrics")["points"].size(), 5u);
  EXPECT_EQ(GetJson("/api/v1/jobs/" + job)["loss"], 5.0);
  GetJson("/api/v1/jobs/" + job + "/metrics?after_step=x", 400);
  // Another agent cannot report for this job's rank; a rank outside the job is refused.
  std::string other = Register(1, "other");
  EXPECT_EQ(ReportMetric(other, job, 6, 1.0).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ReportMetric(agent, job, 6, 1.0, 3).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GetJson("/api/v1/jobs/" + job + "/metrics")["points"].size(), 5u);
}

TEST_F(ApiTest, AgentsList) {
  auto [agent, job] = RunningJob("agents");
  Json a = GetJson("/api/v1/agents")["agents"];
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["id"], agent);
  EXPECT_EQ(a[0]["host"], "host-agents");
  EXPECT_EQ(a[0]["state"], "alive");
  EXPECT_EQ(a[0]["cpus"], 1);
  EXPECT_EQ(a[0]["gpus"], 0);
  EXPECT_FALSE(a[0]["last_heartbeat"].is_null());
  ASSERT_EQ(a[0]["running_ranks"].size(), 1u);
  EXPECT_EQ(a[0]["running_ranks"][0]["job_id"], job);
  EXPECT_EQ(a[0]["running_ranks"][0]["rank"], 0);
  // The gRPC call answers the same.
  v1::ListAgentsResponse resp;
  ASSERT_TRUE(jobs_->ListAgents(Ctx().get(), v1::ListAgentsRequest(), &resp).ok());
  ASSERT_EQ(resp.agents_size(), 1);
  EXPECT_EQ(resp.agents(0).agent_id(), agent);
  const std::string bad = "nope";
  EXPECT_EQ(jobs_->ListAgents(Ctx(&bad).get(), v1::ListAgentsRequest(), &resp).error_code(),
            StatusCode::UNAUTHENTICATED);
}

// A point reported while a client follows /events reaches it within 1 s; the
// stream ends after the job's final state.
TEST_F(ApiTest, EventsStreamDeliversANewPointPromptly) {
  auto [agent, job] = RunningJob("events");
  std::mutex mu;
  std::string got;
  std::atomic<bool> ended{false};
  std::thread reader([&, job = job] {
    httplib::Client c("127.0.0.1", server_->metrics_port());
    c.set_read_timeout(15, 0);
    auto r = c.Get(("/api/v1/jobs/" + job + "/events").c_str(), Auth(),
                   [&](const char* data, size_t n) {
                     std::lock_guard<std::mutex> l(mu);
                     got.append(data, n);
                     return true;
                   });
    EXPECT_TRUE(r);
    if (r) EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    ended = true;
  });
  auto seen = [&](const std::string& what) {
    std::lock_guard<std::mutex> l(mu);
    return got.find(what) != std::string::npos;
  };
  auto wait_for = [&](const std::string& what, std::chrono::milliseconds limit) {
    auto deadline = Clock::now() + limit;
    while (!seen(what) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return seen(what);
  };
  ASSERT_TRUE(wait_for("event: state", std::chrono::seconds(5)));
  auto t0 = Clock::now();
  ASSERT_TRUE(ReportMetric(agent, job, 42, 1.25).ok());
  ASSERT_TRUE(wait_for("event: metrics\ndata: {", std::chrono::seconds(5)));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  std::printf("metrics point reached the event stream in %lld ms\n", static_cast<long long>(ms));
  EXPECT_LT(ms, 1000);
  {
    std::lock_guard<std::mutex> l(mu);
    size_t at = got.find("event: metrics\ndata: ");
    size_t end = got.find('\n', at + 21);
    Json p = Json::parse(got.substr(at + 21, end - at - 21));
    EXPECT_EQ(p["step"], 42);
    EXPECT_EQ(p["loss"], 1.25);
  }
  ASSERT_TRUE(server_->coordinator()->Cancel(job).ok());
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!ended && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(ended) << "the stream ends once the job is terminal";
  EXPECT_TRUE(seen("\"state\":\"CANCELLED\""));
  if (!ended) http_->stop();
  reader.join();
}

}  // namespace
}  // namespace loom::runtime::service

namespace loom::runtime::service {
namespace {

// 1,000 jobs through the coordinator's submit path: the first page, every
// page in turn, and a state filter are right; their times are printed.
TEST_F(ApiTest, ThousandJobsPageAndFilter) {
  constexpr int kJobs = 1000;
  for (int i = 1; i <= kJobs; ++i) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec("bulk-" + std::to_string(i));
    req.set_wait_for_capacity(true);
    auto r = server_->coordinator()->Submit(req);
    ASSERT_TRUE(r.ok()) << r.status();
    if (i % 4 == 0) ASSERT_TRUE(server_->coordinator()->Cancel(r->job().job_id()).ok());
  }
  auto timed = [&](const std::string& path) {
    auto t0 = Clock::now();
    Json j = GetJson(path);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::printf("%s: %.1f ms\n", path.c_str(), ms);
    return j;
  };
  Json first = timed("/api/v1/jobs?page_size=50");
  ASSERT_EQ(first["jobs"].size(), 50u);
  EXPECT_EQ(first["total"], kJobs);
  EXPECT_EQ(first["jobs"][0]["id"], "job-1000") << "newest first";
  EXPECT_EQ(first["jobs"][0]["name"], "bulk-1000");
  EXPECT_EQ(first["jobs"][0]["state"], "CANCELLED");
  EXPECT_EQ(first["jobs"][1]["state"], "PENDING");
  EXPECT_FALSE(first["next_page_token"].get<std::string>().empty());

  std::set<std::string> seen;
  int64_t last = kJobs + 1;
  std::string token;
  int pages = 0;
  do {
    Json page = GetJson("/api/v1/jobs?page_size=50&page_token=" + token);
    for (const Json& j : page["jobs"]) {
      const int64_t id = *ParseJobId(j["id"].get<std::string>());
      EXPECT_LT(id, last) << "descending ids";
      last = id;
      EXPECT_TRUE(seen.insert(j["id"]).second) << j["id"];
    }
    token = page["next_page_token"];
    ++pages;
  } while (!token.empty() && pages < 100);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(pages, kJobs / 50);

  Json cancelled = timed("/api/v1/jobs?state=CANCELLED&page_size=50");
  EXPECT_EQ(cancelled["total"], kJobs / 4);
  ASSERT_EQ(cancelled["jobs"].size(), 50u);
  for (const Json& j : cancelled["jobs"]) EXPECT_EQ(j["state"], "CANCELLED");
  EXPECT_EQ(cancelled["jobs"][0]["id"], "job-1000");
  EXPECT_EQ(cancelled["jobs"][1]["id"], "job-996");
  Json pending = timed("/api/v1/jobs?state=PENDING&page_size=500");
  EXPECT_EQ(pending["total"], kJobs - kJobs / 4);
  EXPECT_EQ(pending["jobs"].size(), 500u);
  EXPECT_EQ(GetJson("/api/v1/jobs?state=RUNNING")["total"], 0);
  GetJson("/api/v1/jobs?state=running-ish", 400);
  GetJson("/api/v1/jobs?page_size=501", 400);
  GetJson("/api/v1/jobs?page_size=0", 400);
  GetJson("/api/v1/jobs?page_token=abc", 400);
}

}  // namespace
}  // namespace loom::runtime::service
