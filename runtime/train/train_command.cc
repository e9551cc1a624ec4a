#include "runtime/train/train_command.h"

#include <cstdlib>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "parallel/planner_command.h"
#include "runtime/data/dataset.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/loss_plot.h"
#include "runtime/train/tb_events.h"
#include "runtime/train/trainer.h"

namespace loom::train {
namespace {

// Under an agent (`loom worker`), LOOM_ERROR_FILE receives the failure reason
// (the job's root cause) and LOOM_PROGRESS_FILE "<step> <checkpoint_step>".
int Fail(int code, absl::string_view msg) {
  std::fprintf(stderr, "loom train: %s\n", std::string(msg).c_str());
  if (const char* f = std::getenv("LOOM_ERROR_FILE"); f != nullptr && *f) std::ofstream(f) << msg << "\n";
  return code;
}

void ReportProgress(int64_t step, int64_t checkpoint_step) {
  static const char* file = std::getenv("LOOM_PROGRESS_FILE");
  if (file == nullptr || *file == '\0') return;
  const std::string tmp = std::string(file) + ".tmp";
  { std::ofstream(tmp) << step << " " << checkpoint_step << "\n"; }
  std::rename(tmp.c_str(), file);
}

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int t = static_cast<int>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

std::string RunFolder(const v1::JobSpec& spec) {
  if (!spec.run_dir().empty()) return spec.run_dir();
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return absl::StrCat("runs/", spec.name(), "-", buf);
}

// Samples `n` tokens after `prompt` with temperature 0.8 from the evaluation
// program (batch row 0; later positions are padding the causal mask ignores).
absl::StatusOr<std::string> Sample(Trainer& t, const v1::JobSpec& spec, std::vector<int32_t> prompt, int n) {
  const int64_t T = spec.model().seq_len(), B = spec.train().batch_size(), V = spec.model().vocab();
  Tensor x = Tensor::Zeros({B, T}, DType::kI32), y = Tensor::Zeros({B, T}, DType::kI32);
  Philox rng(spec.train().seed() + 77, 0);
  std::vector<int32_t> out;
  std::vector<int32_t> ctx = prompt;
  for (int i = 0; i < n; ++i) {
    if (static_cast<int64_t>(ctx.size()) > T) ctx.erase(ctx.begin(), ctx.end() - T);
    int32_t* xp = x.data<int32_t>();
    for (int64_t j = 0; j < T; ++j) xp[j] = j < static_cast<int64_t>(ctx.size()) ? ctx[j] : 0;
    auto r = t.Forward(x, y);
    if (!r.ok()) return r.status();
    const float* logits = r->second.data<float>() + (ctx.size() - 1) * V;
    double mx = -1e30;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
    std::vector<double> p(V);
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += p[v] = std::exp((logits[v] - mx) / 0.8);
    double u = rng.Uniform(i) * z, acc = 0;
    int32_t pick = static_cast<int32_t>(V - 1);
    for (int64_t v = 0; v < V; ++v)
      if ((acc += p[v]) >= u) {
        pick = static_cast<int32_t>(v);
        break;
      }
    out.push_back(pick);
    ctx.push_back(pick);
  }
  return data::DecodeBytes(prompt) + data::DecodeBytes(out);
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) {
  std::string path;
  int steps_override = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--steps" && i + 1 < args.size()) {
      if (!absl::SimpleAtoi(args[++i], &steps_override) || steps_override <= 0)
        return Fail(2, absl::StrCat("--steps: expected a positive integer, got '", args[i], "'"));
    } else if (!args[i].empty() && args[i][0] == '-') {
      return Fail(2, absl::StrCat("unknown flag '", args[i], "' (usage: loom train JOB.yaml [--steps N])"));
    } else if (path.empty()) {
      path = args[i];
    } else {
      return Fail(2, "usage: loom train JOB.yaml [--steps N]");
    }
  }
  if (path.empty()) return Fail(2, "usage: loom train JOB.yaml [--steps N]");
  auto loaded = jobspec::LoadJobSpec(path);
  if (!loaded.ok()) return Fail(2, loaded.status().message());
  v1::JobSpec spec = *loaded;
  if (steps_override > 0) spec.mutable_train()->set_steps(steps_override);
  if (spec.device() != "cpu")
    return Fail(2, absl::StrCat("device: '", spec.device(), "' is not supported by `loom train` yet (use cpu)"));
  // parallel: {tp: auto}: the planner picks the layout (parallel/planner_command.h);
  // its table goes into the run folder as plan.txt / plan.json.
  auto plan = parallel::ResolveAutoLayout(spec, parallel::DefaultHardware(spec));
  if (!plan.ok()) return Fail(2, plan.status().message());
  if (spec.parallel().dp() * std::max(1, spec.parallel().tp()) != 1)
    return Fail(2, "parallel: `loom train` runs one process; dp and tp must be 1");
  const auto& tr = spec.train();
  const auto& m = spec.model();
  std::string data_path = spec.data().path().empty() ? data::kDefaultCorpus : spec.data().path();
  auto tokens = data::LoadTokens(data_path, spec.data().format(), spec.data().tokens_dtype(), m.vocab());
  if (!tokens.ok()) return Fail(2, absl::StrCat("data.path: ", tokens.status().message()));
  data::Split split = data::SplitTokens(*tokens, spec.data().val_fraction(), spec.data().seed());
  auto sampler = data::Sampler::Create(&split.train, m.seq_len(), tr.seed());
  if (!sampler.ok()) return Fail(2, sampler.status().message());
  if (static_cast<int64_t>(split.val.size()) < m.seq_len() + 1)
    return Fail(2, absl::StrCat("data: the validation split (", split.val.size(), " tokens) is shorter than one window"));

  std::printf("loom train: %s model, %d layers, d_model %d, %d heads, seq_len %d, vocab %d\n", m.family().c_str(),
              m.n_layer(), m.d_model(), m.n_head(), m.seq_len(), m.vocab());
  std::printf("data: %s (%zu tokens: %zu train, %zu validation)\n", data_path.c_str(), tokens->size(),
              split.train.size(), split.val.size());
  std::printf("compiling...\n");
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  auto trainer = Trainer::Create(spec);
  if (!trainer.ok()) return Fail(1, trainer.status().message());
  Trainer& t = **trainer;
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("compiled in %.2fs: %.2fM parameters, training arena %.1f MiB, %d threads\n", compile_s,
              t.num_parameters() / 1e6, t.compilation().plan.peak_bytes / 1048576.0, NumThreads());

  const std::string dir = RunFolder(spec);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Fail(1, absl::StrCat("cannot create run folder ", dir, ": ", ec.message()));
  std::ofstream(dir + "/job.yaml") << jobspec::ToYaml(spec);
  if (*plan) {
    absl::Status written = parallel::WritePlan(**plan, dir);
    if (!written.ok()) return Fail(1, written.message());
  }
  std::ofstream metrics(dir + "/metrics.jsonl");
  // TensorBoard: `tensorboard --logdir <run folder>` shows the same scalars.
  auto events = EventWriter::Open(dir);
  if (!events.ok()) return Fail(1, events.status().message());
  auto scalar = [&](absl::string_view tag, int64_t step, double v) -> absl::Status {
    return (*events)->AddScalar(tag, step, v);
  };
  const double bigram = data::BigramLoss(split.train, split.val, m.vocab());
  std::printf("bigram baseline validation loss: %.4f\n", bigram);

  const int64_t B = tr.batch_size(), T = m.seq_len();
  Tensor x = Tensor::MustEmpty({B, T}, DType::kI32), y = Tensor::MustEmpty({B, T}, DType::kI32);
  Tensor vx = Tensor::MustEmpty({B, T}, DType::kI32), vy = Tensor::MustEmpty({B, T}, DType::kI32);
  auto validate = [&]() -> absl::StatusOr<double> {
    double sum = 0;
    for (int i = 0; i < tr.eval_batches(); ++i) {
      absl::Status s = data::ValidationBatch(split.val, T, B, i, &vx, &vy);
      if (!s.ok()) return s;
      auto l = t.Evaluate(vx, vy);
      if (!l.ok()) return l.status();
      sum += *l;
    }
    return sum / tr.eval_batches();
  };
  const bool tty = isatty(fileno(stdout));
  std::vector<std::pair<int64_t, double>> curve, val_curve;
  auto start = std::chrono::steady_clock::now();
  double last_val = NAN;
  for (int step = 1; step <= tr.steps(); ++step) {
    sampler->Next(B, &x, &y);
    auto loss = t.Step(x, y);
    if (!loss.ok()) return Fail(1, loss.status().message());
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double tps = step * B * T / elapsed;
    curve.emplace_back(step, *loss);
    ReportProgress(step, -1);
    if (step % tr.log_every() == 0 || step == tr.steps() || step == 1) {
      metrics << absl::StrFormat("{\"step\": %d, \"loss\": %.6f, \"lr\": %.6g, \"tokens_per_s\": %.1f}\n", step,
                                 *loss, t.LearningRate(step), tps);
      absl::Status s = scalar("train/loss", step, *loss);
      if (s.ok()) s = scalar("train/lr", step, t.LearningRate(step));
      if (s.ok()) s = scalar("train/tokens_per_s", step, tps);
      if (s.ok()) s = (*events)->Flush();
      if (!s.ok()) return Fail(1, s.message());
    }
    if (step % tr.eval_every() == 0 || step == tr.steps()) {
      auto v = validate();
      if (!v.ok()) return Fail(1, v.status().message());
      last_val = *v;
      val_curve.emplace_back(step, *v);
      metrics << absl::StrFormat("{\"step\": %d, \"val_loss\": %.6f}\n", step, *v);
      absl::Status s = scalar("val/loss", step, *v);
      if (!s.ok()) return Fail(1, s.message());
      std::printf("%sstep %d: validation loss %.4f (bigram %.4f)\n", tty ? "\r\033[K" : "", step, *v, bigram);
    }
    if (tty || step % tr.log_every() == 0 || step == tr.steps()) {
      double eta = elapsed / step * (tr.steps() - step);
      std::printf("%sstep %d/%d | loss %.4f | %.0f tok/s | ETA %s%s", tty ? "\r\033[K" : "", step, tr.steps(), *loss,
                  tps, Duration(eta).c_str(), tty ? "" : "\n");
      std::fflush(stdout);
    }
  }
  if (tty) std::printf("\n");
  metrics.close();
  std::ofstream(dir + "/loss.svg") << LossCurveSvg(curve, val_curve, absl::StrCat(spec.name(), ": loss"));
  std::vector<int32_t> prompt(split.val.begin(), split.val.begin() + std::min<int64_t>(16, T / 2));
  int n = tr.sample_tokens() > 0 ? tr.sample_tokens() : 200;
  auto sample = Sample(t, spec, prompt, n);
  if (!sample.ok()) return Fail(1, sample.status().message());
  std::ofstream(dir + "/sample.txt") << *sample;
  std::printf("\nfinal validation loss %.4f (bigram baseline %.4f)\n", last_val, bigram);
  std::printf("sample:\n----\n%s\n----\n", sample->c_str());
  std::printf("run folder: %s (metrics.jsonl, events.out.tfevents.*, loss.svg, sample.txt, job.yaml)\n", dir.c_str());
  return 0;
}

}  // namespace loom::train
