#include "runtime/service/metrics/metrics.h"

#include <cmath>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace loom::runtime::service::metrics {
namespace {

TEST(Metrics, CounterWithLabelsExactText) {
  Registry reg;
  auto* c = reg.AddCounter("loom_restarts_total", "Group restarts.", {"job"});
  c->With({"job-2"}).Inc();
  c->With({"job-1"}).Inc(2.5);
  EXPECT_EQ(reg.Render(),
            "# HELP loom_restarts_total Group restarts.\n"
            "# TYPE loom_restarts_total counter\n"
            "loom_restarts_total{job=\"job-1\"} 2.5\n"
            "loom_restarts_total{job=\"job-2\"} 1\n");
}

TEST(Metrics, CounterIgnoresNegativeAndNan) {
  Counter c;
  c.Inc(3);
  c.Inc(-1);
  c.Inc(std::nan(""));
  EXPECT_EQ(c.Value(), 3);
}

TEST(Metrics, GaugeWithoutLabelsAndFamiliesSortedByName) {
  Registry reg;
  reg.AddGauge("loom_queue_length", "Queued jobs.")->With({}).Set(4);
  auto* g = reg.AddGauge("loom_agents_alive", "Agents with a recent heartbeat.");
  g->With({}).Inc(3);
  g->With({}).Dec();
  EXPECT_EQ(reg.Render(),
            "# HELP loom_agents_alive Agents with a recent heartbeat.\n"
            "# TYPE loom_agents_alive gauge\n"
            "loom_agents_alive 2\n"
            "# HELP loom_queue_length Queued jobs.\n"
            "# TYPE loom_queue_length gauge\n"
            "loom_queue_length 4\n");
}

TEST(Metrics, HistogramBucketsSumCount) {
  Registry reg;
  auto* h = reg.AddHistogram("loom_step_seconds", "Step time.", {"rank"}, {0.1, 0.5, 1});
  auto& s = h->With({"0"});
  s.Observe(0.05);
  s.Observe(0.1);  // upper bounds are inclusive
  s.Observe(0.7);
  s.Observe(3);
  EXPECT_EQ(reg.Render(),
            "# HELP loom_step_seconds Step time.\n"
            "# TYPE loom_step_seconds histogram\n"
            "loom_step_seconds_bucket{rank=\"0\",le=\"0.1\"} 2\n"
            "loom_step_seconds_bucket{rank=\"0\",le=\"0.5\"} 2\n"
            "loom_step_seconds_bucket{rank=\"0\",le=\"1\"} 3\n"
            "loom_step_seconds_bucket{rank=\"0\",le=\"+Inf\"} 4\n"
            "loom_step_seconds_sum{rank=\"0\"} 3.85\n"
            "loom_step_seconds_count{rank=\"0\"} 4\n");
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
  Registry reg;
  reg.AddGauge("g", "line1\nback\\slash \"q\"", {"path"})->With({"a\\b\"c\nd"}).Set(1);
  EXPECT_EQ(reg.Render(),
            "# HELP g line1\\nback\\\\slash \"q\"\n"
            "# TYPE g gauge\n"
            "g{path=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(Metrics, CollectorsRenderAfterFamilies) {
  Registry reg;
  reg.AddGauge("a_gauge", "A.")->With({}).Set(1);
  int calls = 0;
  reg.AddCollector([&] {
    ++calls;
    return std::string("# HELP z_total Z.\n# TYPE z_total counter\nz_total 7\n");
  });
  std::string text = reg.Render();
  EXPECT_EQ(calls, 1);
  EXPECT_LT(text.find("a_gauge 1"), text.find("z_total 7")) << text;
}

TEST(Metrics, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e-9), "1e-09");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(123456789012.5), "123456789012.5");
}

TEST(Metrics, ReRegisteringReturnsSameFamily) {
  Registry reg;
  auto* a = reg.AddCounter("x_total", "h", {"l"});
  auto* b = reg.AddCounter("x_total", "h", {"l"});
  EXPECT_EQ(a, b);
}

TEST(MetricsDeathTest, ProgrammingErrorsAbort) {
  Registry reg;
  EXPECT_DEATH(reg.AddCounter("no_suffix", "h"), "must be named");
  EXPECT_DEATH(reg.AddGauge("bad-name", "h"), "invalid metric name");
  EXPECT_DEATH(reg.AddGauge("g", "h", {"__reserved"}), "invalid label name");
  EXPECT_DEATH(reg.AddHistogram("h", "h", {}, {2, 1}), "strictly increasing");
  reg.AddGauge("dup", "h");
  EXPECT_DEATH(reg.AddCounter("dup_total", "h"); reg.AddGauge("dup_total", "h"), "different type");
  auto* f = reg.AddGauge("two", "h", {"a", "b"});
  EXPECT_DEATH(f->With({"x"}), "expected 2 label values");
}

TEST(Metrics, ConcurrentUpdatesAreCounted) {
  Registry reg;
  auto* c = reg.AddCounter("ops_total", "h", {"t"});
  auto* h = reg.AddHistogram("lat_seconds", "h", {}, DefaultBuckets());
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c->With({std::to_string(t % 2)}).Inc();
        h->With({}).Observe(0.001);
        if (i % 1000 == 0) reg.Render();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(c->With({"0"}).Value() + c->With({"1"}).Value(), 40000);
  EXPECT_EQ(h->With({}).Get().count, 40000u);
}

}  // namespace
}  // namespace loom::runtime::service::metrics
