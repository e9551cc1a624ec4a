// A worker's training metrics in the Prometheus text format: served live over
// HTTP (GET /metrics) while it trains, and written to <run>/metrics.prom at
// every logged step and at the end (node_exporter's textfile-collector
// convention, so a finished job's last values stay readable).
//
//   loom_train_steps_total                    optimizer steps run
//   loom_train_step_seconds                   histogram of step wall time
//   loom_train_tokens_per_second              throughput since the start
//   loom_train_loss, loom_train_val_loss      the latest losses
//   loom_train_learning_rate
//   loom_collective_ops_total{backend,op}     collectives (multi-rank jobs)
//   loom_collective_bytes_total{backend,op}
//   loom_collective_failures_total{backend,op}
//   loom_collective_latency_seconds{backend,op}   histogram, power-of-two bounds
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/metrics.h"
#include "runtime/service/metrics/http_server.h"
#include "runtime/service/metrics/metrics.h"

namespace loom::runtime::train {

class TrainMetrics {
 public:
  TrainMetrics();
  ~TrainMetrics();

  void OnStep(double step_seconds, double loss, double tokens_per_s, double lr);
  void OnValidation(double val_loss);

  // Serves GET /metrics on "host:port" (port 0: any free one); returns the port.
  absl::StatusOr<int> Serve(const std::string& listen);
  // Writes the text atomically (temporary file + rename).
  absl::Status WriteTextFile(const std::string& path) const;
  std::string Render() const { return registry_.Render(); }

 private:
  service::metrics::Registry registry_;
  service::metrics::Counter* steps_;
  service::metrics::Histogram* step_seconds_;
  service::metrics::Gauge *tokens_per_s_, *loss_, *val_loss_, *lr_;
  std::unique_ptr<service::metrics::HttpServer> http_;
};

// The collectives' counters and latency histograms as text-format families.
std::string RenderCollectiveMetrics(const std::map<collectives::MetricsKey, collectives::OpMetrics>& snapshot);

}  // namespace loom::runtime::train
