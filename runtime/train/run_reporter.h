// What a training run leaves in its run folder and prints, shared by
// `loom train` and the ranks of a parallel job (rank 0 reports):
//
//   job.yaml             the spec with defaults
//   tokenizer/           the job's tokenizer (data.tokenizer) as a tokenizer
//                        folder (runtime/data/tokenizer.h), which `loom
//                        sample` decodes with; checked against model.vocab
//   metrics.jsonl        one JSON object per logged step and per validation
//                        (val_loss, and val_perplexity where LossAndPerplexity
//                        shows one), flushed as each is written; appended to when the
//                        folder has one (a restarted or resumed run)
//   metrics.prom         Prometheus text (train_metrics.h), also served live
//                        with --metrics-listen / LOOM_WORKER_METRICS_LISTEN
//   events.out.tfevents.*  TensorBoard scalars (tb_events.h)
//   loss.svg             the loss curve, at Finish
// and, from train/evaluate.h at the end of the run, sample.txt and
// model.safetensors (the final parameters under Loom's names).
// Progress lines go to stdout ("step 10/300 | loss ... | tok/s | ETA"), one
// line per log_every steps, or redrawn in place on a terminal. Under an agent,
// LOOM_PROGRESS_FILE gets "<step> <checkpoint_step>" after every step, and
// LOOM_METRICS_FILE one JSON line per step ({"step", "loss", "lr",
// "tokens_per_s", "step_time_ms"}) and per validation ({"step", "val_loss"}),
// which the agent ships to the coordinator.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/train/tb_events.h"
#include "runtime/train/train_metrics.h"

namespace loom::runtime::train {

// run_dir, or runs/<name>-<local time>.
std::string RunFolder(const v1::JobSpec& spec);

// A validation loss as printed: "2.3456, perplexity 10.45", the perplexity
// exp(loss) shown where the loss is a token cross-entropy in nats (gpt and
// llama, or an ONNX model with model.loss.kind cross_entropy, on data.kind
// causal or mlm); otherwise the loss alone.
std::string LossAndPerplexity(const v1::JobSpec& spec, double loss);

class RunReporter {
 public:
  // Creates `dir` and its files. `metrics_listen` ("" = off) serves /metrics.
  // Without a run_dir the folder is named after the job: InvalidArgument when
  // the name is not [a-z0-9][a-z0-9._-]{0,62} (jobspec/confine.h).
  // A run_dir that cannot be created is InvalidArgument naming run_dir.
  static absl::StatusOr<std::unique_ptr<RunReporter>> Open(const v1::JobSpec& spec, const std::string& dir,
                                                           const std::string& metrics_listen);

  // After optimizer step `step` (1-based) with its loss and learning rate.
  absl::Status Step(int64_t step, double loss, double lr, double step_seconds);
  absl::Status Validation(int64_t step, double val_loss, double baseline);
  // Flushes everything and writes loss.svg.
  absl::Status Finish();

  const std::string& dir() const { return dir_; }

 private:
  RunReporter() = default;
  v1::JobSpec spec_;
  std::string dir_;
  std::ofstream jsonl_;
  TrainMetrics prom_;
  std::unique_ptr<EventWriter> events_;
  bool tty_ = false;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::pair<int64_t, double>> curve_, val_curve_;
};

// Appends `json` and a newline to LOOM_METRICS_FILE when it is set.
void ReportMetricLine(const std::string& json);
// Writes "<step> <checkpoint_step>" to LOOM_PROGRESS_FILE when it is set.
void ReportProgress(int64_t step, int64_t checkpoint_step);

}  // namespace loom::runtime::train
