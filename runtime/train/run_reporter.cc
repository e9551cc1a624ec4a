#include "runtime/train/run_reporter.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/data/tokenizer.h"
#include "runtime/jobspec/confine.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/loss_plot.h"

namespace loom::runtime::train {
namespace {

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int t = static_cast<int>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

}  // namespace

std::string RunFolder(const v1::JobSpec& spec) {
  if (!spec.run_dir().empty()) return spec.run_dir();
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return absl::StrCat("runs/", spec.name(), "-", buf);
}

void ReportProgress(int64_t step, int64_t checkpoint_step) {
  static const char* file = std::getenv("LOOM_PROGRESS_FILE");
  if (file == nullptr || *file == '\0') return;
  const std::string tmp = std::string(file) + ".tmp";
  { std::ofstream(tmp) << step << " " << checkpoint_step << "\n"; }
  std::rename(tmp.c_str(), file);
}

void ReportMetricLine(const std::string& json) {
  const char* file = std::getenv("LOOM_METRICS_FILE");
  if (file == nullptr || *file == '\0') return;
  static std::string path;
  static std::ofstream out;
  if (path != file) {
    out.close();
    out.clear();
    out.open(file, std::ios::app);
    path = file;
  }
  out << json << "\n" << std::flush;  // whole lines: the agent ships complete lines only
}

namespace {

// The job's tokenizer, checked against the model, as a tokenizer folder
// (data/tokenizer.h) inside the run folder: what `loom sample` decodes with.
absl::Status RecordTokenizer(const v1::JobSpec& spec, const std::string& dir) {
  auto tok = data::LoadJobTokenizer(spec);
  if (!tok.ok()) return tok.status();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return (*tok)->Save(dir);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunReporter>> RunReporter::Open(const v1::JobSpec& spec, const std::string& dir,
                                                               const std::string& metrics_listen) {
  if (spec.run_dir().empty()) {  // the folder is named after the job: a name must not be a path
    absl::Status name = jobspec::ValidateJobName("name", spec.name());
    if (!name.ok()) return absl::InvalidArgumentError(absl::StrCat(name.message(), " (or set run_dir)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // A run_dir the spec names is the user's input: a folder that cannot be made
  // there is bad input naming the field.
  if (ec && !spec.run_dir().empty())
    return absl::InvalidArgumentError(absl::StrCat("run_dir: cannot create ", dir, ": ", ec.message()));
  if (ec) return absl::InternalError(absl::StrCat("cannot create run folder ", dir, ": ", ec.message()));
  std::unique_ptr<RunReporter> r(new RunReporter());
  r->spec_ = spec;
  r->dir_ = dir;
  std::ofstream(dir + "/job.yaml") << jobspec::ToYaml(spec);
  if (absl::Status s = RecordTokenizer(spec, dir + "/tokenizer"); !s.ok()) return s;
  // Appended: a restarted or resumed run adds to what the earlier attempts logged.
  r->jsonl_.open(dir + "/metrics.jsonl", std::ios::app);
  if (!r->jsonl_) return absl::InternalError(absl::StrCat("cannot write ", dir, "/metrics.jsonl"));
  if (!metrics_listen.empty()) {
    auto port = r->prom_.Serve(metrics_listen);
    if (!port.ok()) return absl::InvalidArgumentError(absl::StrCat("--metrics-listen: ", port.status().message()));
    std::printf("metrics: http://%s:%d/metrics\n", metrics_listen.substr(0, metrics_listen.rfind(':')).c_str(), *port);
  }
  // TensorBoard: `tensorboard --logdir <run folder>` shows the same scalars.
  auto events = EventWriter::Open(dir);
  if (!events.ok()) return events.status();
  r->events_ = std::move(*events);
  r->tty_ = isatty(fileno(stdout));
  r->start_ = std::chrono::steady_clock::now();
  return r;
}

absl::Status RunReporter::Step(int64_t step, double loss, double lr, double step_seconds) {
  const auto& tr = spec_.train();
  const int64_t tokens_per_step = int64_t{tr.batch_size()} * spec_.model().seq_len();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double tps = step * tokens_per_step / std::max(elapsed, 1e-9);
  curve_.emplace_back(step, loss);
  prom_.OnStep(step_seconds, loss, tps, lr);
  ReportProgress(step, -1);
  ReportMetricLine(absl::StrFormat(
      "{\"step\": %d, \"loss\": %.9g, \"lr\": %.6g, \"tokens_per_s\": %.1f, \"step_time_ms\": %.3f}", step, loss,
      lr, tps, step_seconds * 1000.0));
  if (step % tr.log_every() == 0 || step == tr.steps() || step == 1) {
    jsonl_ << absl::StrFormat("{\"step\": %d, \"loss\": %.9g, \"lr\": %.6g, \"tokens_per_s\": %.1f}\n", step, loss,
                              lr, tps)
           << std::flush;
    if (!jsonl_) return absl::InternalError(absl::StrCat("cannot write ", dir_, "/metrics.jsonl"));
    absl::Status s = events_->AddScalar("train/loss", step, loss);
    if (s.ok()) s = events_->AddScalar("train/lr", step, lr);
    if (s.ok()) s = events_->AddScalar("train/tokens_per_s", step, tps);
    if (s.ok()) s = events_->Flush();
    if (s.ok()) s = prom_.WriteTextFile(dir_ + "/metrics.prom");
    if (!s.ok()) return s;
  }
  if (tty_ || step % tr.log_every() == 0 || step == tr.steps()) {
    double eta = elapsed / step * (tr.steps() - step);
    std::printf("%sstep %d/%d | loss %.4f | %.0f tok/s | ETA %s%s", tty_ ? "\r\033[K" : "", static_cast<int>(step),
                tr.steps(), loss, tps, Duration(eta).c_str(), tty_ ? "" : "\n");
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

namespace {

bool LossIsTokenCrossEntropy(const v1::JobSpec& spec) {
  const std::string& kind = spec.data().kind();
  if (!kind.empty() && kind != "causal" && kind != "mlm") return false;  // empty: the default, causal
  return spec.model().family() != "onnx" || spec.model().loss().kind() == "cross_entropy";
}

}  // namespace

std::string LossAndPerplexity(const v1::JobSpec& spec, double loss) {
  if (!LossIsTokenCrossEntropy(spec)) return absl::StrFormat("%.4f", loss);
  return absl::StrFormat("%.4f, perplexity %.4g", loss, std::exp(loss));
}

absl::Status RunReporter::Validation(int64_t step, double val_loss, double baseline) {
  val_curve_.emplace_back(step, val_loss);
  const std::string ppl =
      LossIsTokenCrossEntropy(spec_) ? absl::StrFormat(", \"val_perplexity\": %.6g", std::exp(val_loss)) : "";
  jsonl_ << absl::StrFormat("{\"step\": %d, \"val_loss\": %.6f%s}\n", step, val_loss, ppl) << std::flush;
  ReportMetricLine(absl::StrFormat("{\"step\": %d, \"val_loss\": %.9g}", step, val_loss));
  prom_.OnValidation(val_loss);
  std::printf("%sstep %d: validation loss %s%s\n", tty_ ? "\r\033[K" : "", static_cast<int>(step),
              LossAndPerplexity(spec_, val_loss).c_str(),
              std::isnan(baseline) ? "" : absl::StrFormat(" (bigram %.4f)", baseline).c_str());
  return events_->AddScalar("val/loss", step, val_loss);
}

absl::Status RunReporter::Finish() {
  if (tty_) std::printf("\n");
  jsonl_.close();
  absl::Status s = events_->Flush();
  if (s.ok()) s = prom_.WriteTextFile(dir_ + "/metrics.prom");
  if (!s.ok()) return s;
  std::ofstream(dir_ + "/loss.svg") << LossCurveSvg(curve_, val_curve_, absl::StrCat(spec_.name(), ": loss"));
  std::printf("\nloss curve (* training, o validation):\n%s", LossCurveText(curve_, val_curve_).c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace loom::runtime::train
