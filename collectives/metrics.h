// Metrics hooks: per-(backend, op) counts, bytes, failures and a latency
// histogram, for the service to export (e.g. as Prometheus counters and
// histograms). Backends call Record() when an op completes; exporters call
// Snapshot(). Process-wide and thread-safe.
//
//   for (const auto& [key, m] : GlobalCollectiveMetrics().Snapshot())
//     export(key.backend, key.op, m.count, m.bytes, m.latency_buckets);
//
// Latency buckets are powers of two in microseconds: bucket i counts ops with
// latency < 2^i us (the last bucket is unbounded).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace loom::collectives {

struct OpMetrics {
  static constexpr int kBuckets = 32;
  int64_t count = 0;
  int64_t failures = 0;
  int64_t bytes = 0;
  double total_seconds = 0;
  std::array<int64_t, kBuckets> latency_buckets{};
};

struct MetricsKey {
  std::string backend;
  std::string op;
  bool operator<(const MetricsKey& o) const {
    return backend != o.backend ? backend < o.backend : op < o.op;
  }
};

class CollectiveMetrics {
 public:
  void Record(const std::string& backend, const std::string& op, int64_t bytes, absl::Duration latency,
              bool ok);
  std::map<MetricsKey, OpMetrics> Snapshot();
  void Reset();

 private:
  absl::Mutex mu_;
  std::map<MetricsKey, OpMetrics> m_ ABSL_GUARDED_BY(mu_);
};

CollectiveMetrics& GlobalCollectiveMetrics();

}  // namespace loom::collectives
