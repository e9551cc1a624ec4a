#include "collectives/metrics.h"

namespace loom::collectives {

void CollectiveMetrics::Record(const std::string& backend, const std::string& op, int64_t bytes,
                               absl::Duration latency, bool ok) {
  double us = absl::ToDoubleMicroseconds(latency);
  int b = 0;
  while (b < OpMetrics::kBuckets - 1 && us >= static_cast<double>(int64_t{1} << b)) ++b;
  absl::MutexLock l(&mu_);
  OpMetrics& m = m_[MetricsKey{backend, op}];
  ++m.count;
  if (!ok) ++m.failures;
  m.bytes += bytes;
  m.total_seconds += absl::ToDoubleSeconds(latency);
  ++m.latency_buckets[b];
}

std::map<MetricsKey, OpMetrics> CollectiveMetrics::Snapshot() {
  absl::MutexLock l(&mu_);
  return m_;
}

void CollectiveMetrics::Reset() {
  absl::MutexLock l(&mu_);
  m_.clear();
}

CollectiveMetrics& GlobalCollectiveMetrics() {
  static auto* m = new CollectiveMetrics();
  return *m;
}

}  // namespace loom::collectives
