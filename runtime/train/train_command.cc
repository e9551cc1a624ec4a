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
#include "runtime/train/run_reporter.h"
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
  // Live Prometheus metrics (also from env LOOM_METRICS_LISTEN, as agents set it).
  std::string metrics_listen;
  if (const char* e = std::getenv("LOOM_METRICS_LISTEN"); e != nullptr) metrics_listen = e;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--steps" && i + 1 < args.size()) {
      if (!absl::SimpleAtoi(args[++i], &steps_override) || steps_override <= 0)
        return Fail(2, absl::StrCat("--steps: expected a positive integer, got '", args[i], "'"));
    } else if (args[i] == "--metrics-listen" && i + 1 < args.size()) {
      metrics_listen = args[++i];
    } else if (!args[i].empty() && args[i][0] == '-') {
      return Fail(2, absl::StrCat("unknown flag '", args[i], "' (usage: loom train JOB.yaml [--steps N] [--metrics-listen HOST:PORT])"));
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
  auto reporter = RunReporter::Open(spec, dir, metrics_listen);
  if (!reporter.ok()) return Fail(absl::IsInvalidArgument(reporter.status()) ? 2 : 1, reporter.status().message());
  RunReporter& report = **reporter;
  if (*plan) {
    absl::Status written = parallel::WritePlan(**plan, dir);
    if (!written.ok()) return Fail(1, written.message());
  }
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
  double last_val = NAN;
  for (int step = 1; step <= tr.steps(); ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    sampler->Next(B, &x, &y);
    auto loss = t.Step(x, y);
    if (!loss.ok()) return Fail(1, loss.status().message());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (absl::Status s = report.Step(step, *loss, t.LearningRate(step), dt); !s.ok()) return Fail(1, s.message());
    if (step % tr.eval_every() == 0 || step == tr.steps()) {
      auto v = validate();
      if (!v.ok()) return Fail(1, v.status().message());
      last_val = *v;
      if (absl::Status s = report.Validation(step, *v, bigram); !s.ok()) return Fail(1, s.message());
    }
  }
  if (absl::Status s = report.Finish(); !s.ok()) return Fail(1, s.message());
  std::vector<int32_t> prompt(split.val.begin(), split.val.begin() + std::min<int64_t>(16, T / 2));
  int n = tr.sample_tokens() > 0 ? tr.sample_tokens() : 200;
  auto sample = Sample(t, spec, prompt, n);
  if (!sample.ok()) return Fail(1, sample.status().message());
  std::ofstream(dir + "/sample.txt") << *sample;
  std::printf("\nfinal validation loss %.4f (bigram baseline %.4f)\n", last_val, bigram);
  std::printf("sample:\n----\n%s\n----\n", sample->c_str());
  std::printf("run folder: %s (metrics.jsonl, metrics.prom, events.out.tfevents.*, loss.svg, sample.txt, job.yaml)\n", dir.c_str());
  return 0;
}

}  // namespace loom::train
