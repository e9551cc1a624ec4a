#include "runtime/service/metrics/http_server.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace loom::runtime::service::metrics {
namespace {

// Runs a command and returns its stdout; the exit status goes to *rc.
std::string RunCommand(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

// Scrapes http://127.0.0.1:PORT/metrics with urllib (5 s deadline) and parses it
// with prometheus_client's own parser; prints one line per sample.
constexpr char kScraper[] = R"PY(
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
r = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5)
assert r.headers.get("Content-Type").startswith("text/plain; version=0.0.4"), r.headers
for fam in text_string_to_metric_families(r.read().decode()):
    for s in fam.samples:
        labels = ",".join("%s=%s" % kv for kv in sorted(s.labels.items()))
        print(fam.type, fam.name, s.name, labels, repr(float(s.value)))
)PY";

TEST(HttpServer, PrometheusClientParsesScrape) {
  Registry reg;
  reg.AddCounter("loom_jobs_submitted_total", "Jobs submitted.", {"result"})->With({"ok"}).Inc(3);
  reg.AddGauge("loom_jobs", "Jobs by state.", {"state"})->With({"RUNNING"}).Set(2);
  reg.AddGauge("loom_weird", "Escapes.", {"v"})->With({"a\"b\\c\nd"}).Set(-1.5);
  auto* h = reg.AddHistogram("loom_schedule_latency_seconds", "Latency.", {}, {0.01, 0.1});
  h->With({}).Observe(0.05);
  h->With({}).Observe(0.2);

  HttpServer server(&reg);
  auto port = server.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();

  std::string script = kScraper;
  int rc = 0;
  std::string out = RunCommand("/usr/bin/python3 -c '" + script + "' " + std::to_string(*port) + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("counter loom_jobs_submitted loom_jobs_submitted_total result=ok 3.0\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("gauge loom_jobs loom_jobs state=RUNNING 2.0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("gauge loom_weird loom_weird v=a\"b\\c\nd -1.5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("histogram loom_schedule_latency_seconds loom_schedule_latency_seconds_bucket le=0.1 1.0\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("loom_schedule_latency_seconds_bucket le=+Inf 2.0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("loom_schedule_latency_seconds_count  2.0\n"), std::string::npos) << out;
  server.Stop();
}

TEST(HttpServer, UnknownPathIs404AndStopIsIdempotent) {
  Registry reg;
  HttpServer server(&reg);
  auto port = server.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  int rc = 0;
  std::string out = RunCommand(
      "/usr/bin/python3 -c 'import sys, urllib.request, urllib.error\n"
      "try:\n urllib.request.urlopen(\"http://127.0.0.1:%s/other\" % sys.argv[1], timeout=5)\n"
      "except urllib.error.HTTPError as e: print(e.code)' " + std::to_string(*port),
      &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "404\n");
  EXPECT_FALSE(server.Start("127.0.0.1", 0).ok());  // already started
  server.Stop();
  server.Stop();
}

TEST(HttpServer, BindFailureIsAnError) {
  Registry reg;
  HttpServer a(&reg), b(&reg);
  auto port = a.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  auto again = b.Start("127.0.0.1", *port);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace loom::runtime::service::metrics
