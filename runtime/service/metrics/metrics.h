// A small, thread-safe metrics registry that renders the Prometheus text
// exposition format (version 0.0.4).
//
// Families are registered once by name, with HELP text and label names; a
// series is one set of label values within a family. Counters must be named
// `*_total`, durations `*_seconds` by convention (the caller chooses names; a
// counter without `_total` is a programming error and aborts at registration).
//
//   metrics::Registry reg;
//   auto* jobs = reg.AddGauge("loom_jobs", "Jobs by state.", {"state"});
//   jobs->With({"RUNNING"}).Set(3);
//   auto* lat = reg.AddHistogram("loom_schedule_latency_seconds", "Submit to placement.",
//                                {}, metrics::DefaultBuckets());
//   lat->With({}).Observe(0.02);
//   std::string text = reg.Render();
//
// Registering an existing name with the same type and labels returns the same
// family; a mismatch aborts. All series objects live as long as the registry,
// so pointers and references to them stay valid. Label values are escaped
// (backslash, double quote, newline) on rendering.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace loom::runtime::service::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// A monotonically increasing value. Inc with a negative amount is ignored.
class Counter {
 public:
  void Inc(double amount = 1.0);
  double Value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v); }
  void Inc(double amount = 1.0);
  void Dec(double amount = 1.0) { Inc(-amount); }
  double Value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0.0};
};

// Cumulative buckets with the given finite upper bounds (sorted ascending; +Inf
// is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Get() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, non-cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Prometheus' default latency buckets, 5 ms .. 10 s.
std::vector<double> DefaultBuckets();
// `count` bounds start, start*factor, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

template <typename M>
class Family;

// Type-erased part of a family, used by the registry for rendering.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), type_(type), label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  void Render(std::string* out) const;

 protected:
  virtual void RenderSeries(std::string* out) const = 0;
  std::string name_, help_;
  MetricType type_;
  std::vector<std::string> label_names_;
  mutable std::mutex mu_;
};

template <typename M>
class Family : public FamilyBase {
 public:
  using FamilyBase::FamilyBase;
  // The series for these label values (one per label name, in order); created
  // on first use. A wrong number of values aborts (programming error).
  M& With(const std::vector<std::string>& values);
  // Drops every series (e.g. before re-exporting a gauge snapshot).
  void Clear();

  void set_buckets(std::vector<double> b) { buckets_ = std::move(b); }

 protected:
  void RenderSeries(std::string* out) const override;

 private:
  std::map<std::vector<std::string>, std::unique_ptr<M>> series_;
  std::vector<double> buckets_;
};

class Registry {
 public:
  Family<Counter>* AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>* AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>* AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names, std::vector<double> buckets);
  // A collector renders families kept elsewhere (e.g. a snapshot of another
  // module's counters) at each Render, after the registry's own families. It
  // must return complete text-format families (HELP, TYPE, samples).
  void AddCollector(std::function<std::string()> collector);
  // The whole registry in the text format, families sorted by name, then the
  // collectors' output in registration order.
  std::string Render() const;

 private:
  FamilyBase* Find(const std::string& name, MetricType type, const std::vector<std::string>& labels);
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_;
  std::vector<std::function<std::string()>> collectors_;
};

// Helpers exposed for tests and other exporters.
std::string EscapeLabelValue(const std::string& v);
std::string FormatValue(double v);
bool IsValidMetricName(const std::string& name);
bool IsValidLabelName(const std::string& name);

}  // namespace loom::runtime::service::metrics
