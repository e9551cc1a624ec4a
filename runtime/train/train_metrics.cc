#include "runtime/train/train_metrics.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::runtime::train {
namespace {

std::string Labels(const collectives::MetricsKey& k) {
  return absl::StrCat("{backend=\"", k.backend, "\",op=\"", k.op, "\"}");
}

std::string LabelsLe(const collectives::MetricsKey& k, const std::string& le) {
  return absl::StrCat("{backend=\"", k.backend, "\",op=\"", k.op, "\",le=\"", le, "\"}");
}

}  // namespace

std::string RenderCollectiveMetrics(const std::map<collectives::MetricsKey, collectives::OpMetrics>& snapshot) {
  if (snapshot.empty()) return "";
  std::string out;
  auto counter = [&](const char* name, const char* help, auto field) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n");
    for (const auto& [k, m] : snapshot) absl::StrAppend(&out, name, Labels(k), " ", field(m), "\n");
  };
  counter("loom_collective_ops_total", "Collective operations completed.",
          [](const collectives::OpMetrics& m) { return m.count; });
  counter("loom_collective_bytes_total", "Bytes moved by collective operations.",
          [](const collectives::OpMetrics& m) { return m.bytes; });
  counter("loom_collective_failures_total", "Collective operations that failed.",
          [](const collectives::OpMetrics& m) { return m.failures; });
  const char* h = "loom_collective_latency_seconds";
  absl::StrAppend(&out, "# HELP ", h, " Collective operation latency.\n# TYPE ", h, " histogram\n");
  for (const auto& [k, m] : snapshot) {
    int64_t cumulative = 0;
    // Bucket i counts latencies below 2^i microseconds; the last is unbounded.
    for (int i = 0; i + 1 < collectives::OpMetrics::kBuckets; ++i) {
      cumulative += m.latency_buckets[i];
      absl::StrAppend(&out, h, "_bucket", LabelsLe(k, absl::StrCat(std::ldexp(1e-6, i))), " ", cumulative, "\n");
    }
    absl::StrAppend(&out, h, "_bucket", LabelsLe(k, "+Inf"), " ", m.count, "\n");
    absl::StrAppend(&out, h, "_sum", Labels(k), " ", m.total_seconds, "\n");
    absl::StrAppend(&out, h, "_count", Labels(k), " ", m.count, "\n");
  }
  return out;
}

TrainMetrics::TrainMetrics() {
  steps_ = &registry_.AddCounter("loom_train_steps_total", "Optimizer steps run.")->With({});
  step_seconds_ = &registry_
                       .AddHistogram("loom_train_step_seconds", "Wall time of one training step.", {},
                                     service::metrics::ExponentialBuckets(0.001, 2, 16))
                       ->With({});
  tokens_per_s_ = &registry_.AddGauge("loom_train_tokens_per_second", "Training throughput since the start.")->With({});
  loss_ = &registry_.AddGauge("loom_train_loss", "Training loss of the latest step.")->With({});
  val_loss_ = &registry_.AddGauge("loom_train_val_loss", "Latest validation loss.")->With({});
  lr_ = &registry_.AddGauge("loom_train_learning_rate", "Learning rate of the latest step.")->With({});
  registry_.AddCollector([] { return RenderCollectiveMetrics(collectives::GlobalCollectiveMetrics().Snapshot()); });
}

TrainMetrics::~TrainMetrics() {
  if (http_) http_->Stop();
}

void TrainMetrics::OnStep(double step_seconds, double loss, double tokens_per_s, double lr) {
  steps_->Inc();
  step_seconds_->Observe(step_seconds);
  tokens_per_s_->Set(tokens_per_s);
  loss_->Set(loss);
  lr_->Set(lr);
}

void TrainMetrics::OnValidation(double val_loss) { val_loss_->Set(val_loss); }

absl::StatusOr<int> TrainMetrics::Serve(const std::string& listen) {
  std::vector<std::string> hp = absl::StrSplit(listen, absl::MaxSplits(':', 1));
  int port = -1;
  if (hp.size() != 2 || hp[0].empty() || !absl::SimpleAtoi(hp[1], &port) || port < 0 || port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("metrics listen address: expected HOST:PORT, got '", listen, "'"));
  http_ = std::make_unique<service::metrics::HttpServer>(&registry_);
  return http_->Start(hp[0], port);
}

absl::Status TrainMetrics::WriteTextFile(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << registry_.Render();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError(absl::StrCat("cannot rename to ", path));
  return absl::OkStatus();
}

}  // namespace loom::runtime::train
