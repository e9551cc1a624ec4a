#include "runtime/service/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace loom::runtime::service::metrics {
namespace {

void Die(const std::string& msg) {
  std::fprintf(stderr, "loom metrics: %s\n", msg.c_str());
  std::abort();
}

void AtomicAdd(std::atomic<double>& a, double d) {
  double cur = a.load();
  while (!a.compare_exchange_weak(cur, cur + d)) {
  }
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// `{a="x",b="y"}` or "" when there are no labels. `extra` is appended last
// (the histogram's `le`).
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + EscapeLabelValue(extra_value) + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

}  // namespace

void Counter::Inc(double amount) {
  if (!(amount >= 0)) return;  // also drops NaN
  AtomicAdd(value_, amount);
}

void Gauge::Inc(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
  std::lock_guard<std::mutex> l(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::Get() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> l(mu_);
  uint64_t run = 0;
  for (uint64_t c : counts_) {
    run += c;
    s.cumulative.push_back(run);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> DefaultBuckets() { return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}; }

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {  // shortest text that round-trips
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

bool IsValidMetricName(const std::string& n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& n) {
  if (n.empty() || n.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void FamilyBase::Render(std::string* out) const {
  *out += "# HELP " + name_ + " " + EscapeHelp(help_) + "\n";
  *out += "# TYPE " + name_ + " " + TypeName(type_) + "\n";
  RenderSeries(out);
}

template <typename M>
M& Family<M>::With(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    Die(name_ + ": expected " + std::to_string(label_names_.size()) + " label values, got " +
        std::to_string(values.size()));
  }
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = series_[values];
  if (!slot) {
    if constexpr (std::is_same_v<M, Histogram>) {
      slot = std::make_unique<Histogram>(buckets_);
    } else {
      slot = std::make_unique<M>();
    }
  }
  return *slot;
}

template <typename M>
void Family<M>::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  series_.clear();
}

template <typename M>
void Family<M>::RenderSeries(std::string* out) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [values, m] : series_) {
    if constexpr (std::is_same_v<M, Histogram>) {
      Histogram::Snapshot s = m->Get();
      for (size_t i = 0; i <= s.bounds.size(); ++i) {
        std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
        *out += name_ + "_bucket" + LabelSet(label_names_, values, "le", le) + " " +
                FormatValue(static_cast<double>(s.cumulative[i])) + "\n";
      }
      std::string ls = LabelSet(label_names_, values);
      *out += name_ + "_sum" + ls + " " + FormatValue(s.sum) + "\n";
      *out += name_ + "_count" + ls + " " + FormatValue(static_cast<double>(s.count)) + "\n";
    } else {
      *out += name_ + LabelSet(label_names_, values) + " " + FormatValue(m->Value()) + "\n";
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

FamilyBase* Registry::Find(const std::string& name, MetricType type, const std::vector<std::string>& labels) {
  if (!IsValidMetricName(name)) Die("invalid metric name '" + name + "'");
  for (const auto& l : labels) {
    if (!IsValidLabelName(l) || (type == MetricType::kHistogram && l == "le")) {
      Die(name + ": invalid label name '" + l + "'");
    }
  }
  auto it = families_.find(name);
  if (it == families_.end()) return nullptr;
  if (it->second->type() != type || it->second->label_names() != labels) {
    Die("metric '" + name + "' registered twice with a different type or labels");
  }
  return it->second.get();
}

Family<Counter>* Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  if (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0) {
    Die("counter '" + name + "' must be named *_total");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (auto* f = Find(name, MetricType::kCounter, label_names)) return static_cast<Family<Counter>*>(f);
  auto f = std::make_unique<Family<Counter>>(name, help, MetricType::kCounter, std::move(label_names));
  auto* raw = f.get();
  families_[name] = std::move(f);
  return raw;
}

Family<Gauge>* Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto* f = Find(name, MetricType::kGauge, label_names)) return static_cast<Family<Gauge>*>(f);
  auto f = std::make_unique<Family<Gauge>>(name, help, MetricType::kGauge, std::move(label_names));
  auto* raw = f.get();
  families_[name] = std::move(f);
  return raw;
}

Family<Histogram>* Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names, std::vector<double> buckets) {
  if (!std::is_sorted(buckets.begin(), buckets.end()) ||
      std::adjacent_find(buckets.begin(), buckets.end()) != buckets.end() ||
      std::any_of(buckets.begin(), buckets.end(), [](double b) { return !std::isfinite(b); })) {
    Die(name + ": histogram buckets must be finite and strictly increasing");
  }
  std::lock_guard<std::mutex> l(mu_);
  if (auto* f = Find(name, MetricType::kHistogram, label_names)) return static_cast<Family<Histogram>*>(f);
  auto f = std::make_unique<Family<Histogram>>(name, help, MetricType::kHistogram, std::move(label_names));
  f->set_buckets(std::move(buckets));
  auto* raw = f.get();
  families_[name] = std::move(f);
  return raw;
}

void Registry::AddCollector(std::function<std::string()> collector) {
  std::lock_guard<std::mutex> l(mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const auto& [name, f] : families_) f->Render(&out);
  for (const auto& c : collectors_) out += c();
  return out;
}

}  // namespace loom::runtime::service::metrics
