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
#include "base/flags.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/status.h"
#include "collectives/process_group.h"
#include "base/thread_pool.h"
#include "runtime/checkpoint/init_from.h"
#include "runtime/plan/planner_command.h"
#include "runtime/data/dataset.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/train_data.h"
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



// The loss of the step just run, averaged across the world's ranks on the GPU
// (the process group's CUDA backend: NCCL), written back into *loss.
absl::Status AverageLoss(Trainer& t, collectives::ProcessGroup& world, float* loss) {
  LOOM_ASSIGN_OR_RETURN(Tensor dev, t.DeviceLoss());
  collectives::AllReduceOptions o;
  o.op = collectives::ReduceOp::kAvg;
  LOOM_ASSIGN_OR_RETURN(collectives::WorkPtr w, world.AllReduce(dev, o));
  LOOM_RETURN_IF_ERROR(w->Wait());
  LOOM_ASSIGN_OR_RETURN(*loss, t.ReadLoss());
  return absl::OkStatus();
}

// spec.init_from, whole parameters in Loom's layout (checkpoint/init_from.h).
absl::Status LoadInitParameters(const v1::JobSpec& spec, std::map<std::string, Tensor>* init) {
  LOOM_ASSIGN_OR_RETURN(auto source, checkpoint::InitSource::Open(spec.init_from(), spec.model()));
  std::printf("initial parameters: %s\n", source->Describe().c_str());
  LOOM_ASSIGN_OR_RETURN(*init, source->ReadAll());
  return absl::OkStatus();
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) { return RunTrainCommand(args, nullptr); }

int RunTrainCommand(const std::vector<std::string>& args, collectives::ProcessGroup* world) {
  std::vector<std::string> positional;
  int steps_override = 0;
  std::string init_from;  // --init: overrides the spec's init_from
  std::string metrics_listen;
  FlagSet fs("loom train", "JOB.yaml", "Trains a model from a job spec in this process (dp and tp 1).");
  fs.Int("steps", &steps_override, "N", "train N steps instead of the spec's train.steps", 1)
      .String("init", &init_from, "FILE", "initial parameters (overrides the spec's init_from)")
      .String("metrics-listen", &metrics_listen, "HOST:PORT", "serve live Prometheus metrics there")
      .Env("LOOM_WORKER_METRICS_LISTEN")
      .Positionals(&positional, "JOB.yaml", 1, 1);
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  const std::string& path = positional[0];
  auto loaded = jobspec::LoadJobSpec(path);
  if (!loaded.ok()) return Fail(2, loaded.status().message());
  v1::JobSpec spec = *loaded;
  if (steps_override > 0) spec.mutable_train()->set_steps(steps_override);
  if (!init_from.empty()) spec.set_init_from(init_from);
  // parallel: {tp: auto}: the planner picks the layout (runtime/plan/planner_command.h);
  // its table goes into the run folder as plan.txt / plan.json.
  auto plan = plan::ResolveAutoLayout(spec, plan::DefaultHardware(spec));
  if (!plan.ok()) return Fail(2, plan.status().message());
  if (spec.parallel().dp() * std::max(1, spec.parallel().tp()) != 1)
    return Fail(2, "parallel: `loom train` runs one process; dp and tp must be 1");
  const auto& tr = spec.train();
  const auto& m = spec.model();
  if (m.family() == "onnx") {
    std::printf("loom train: onnx model %s, seq_len %d, vocab %d\n", m.onnx().c_str(), m.seq_len(), m.vocab());
  } else {
    std::printf("loom train: %s model, %d layers, d_model %d, %d heads, seq_len %d, vocab %d\n", m.family().c_str(),
                m.n_layer(), m.d_model(), m.n_head(), m.seq_len(), m.vocab());
  }
  auto dataset = OpenTrainingData(spec, /*print=*/true);
  if (!dataset.ok()) return Fail(2, dataset.status().message());
  std::printf("compiling...\n");
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  TrainerOptions options;
  if (!spec.init_from().empty()) {
    absl::Status s = LoadInitParameters(spec, &options.init);
    if (!s.ok()) return Fail(absl::IsInvalidArgument(s) ? 2 : 1, s.message());
  }
  auto trainer = Trainer::Create(spec, std::move(options));
  // A model file Loom cannot import is bad input (exit 2), like a bad job spec.
  if (!trainer.ok())
    return Fail(m.family() == "onnx" && absl::IsInvalidArgument(trainer.status()) ? 2 : 1, trainer.status().message());
  Trainer& t = **trainer;
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (spec.device() == "cuda") {
    std::printf("compiled in %.2fs: %.2fM parameters, device cuda, precision %s\n", compile_s,
                t.num_parameters() / 1e6, tr.precision().c_str());
  } else {
    std::printf("compiled in %.2fs: %.2fM parameters, training arena %.1f MiB, %d threads\n", compile_s,
                t.num_parameters() / 1e6, t.compilation().plan.peak_bytes / 1048576.0, NumThreads());
  }

  if (world != nullptr) {
    if (spec.device() != "cuda")
      return Fail(2, "device: a world-1 process group is only used for device: cuda (CPU jobs run as `loom train`)");
    auto b = world->BackendFor(Device::CUDA(0), collectives::OpType::kAllReduce, DType::kF32);
    if (!b.ok()) return Fail(1, absl::StrCat("process group: no CUDA backend: ", b.status().message()));
    std::printf("process group: rank %d of %d, CUDA collectives through %s\n", world->rank(), world->size(),
                std::string((*b)->name()).c_str());
  }

  const std::string dir = RunFolder(spec);
  auto reporter = RunReporter::Open(spec, dir, metrics_listen);
  if (!reporter.ok()) return Fail(absl::IsInvalidArgument(reporter.status()) ? 2 : 1, reporter.status().message());
  RunReporter& report = **reporter;
  if (*plan) {
    absl::Status written = plan::WritePlan(**plan, dir);
    if (!written.ok()) return Fail(1, written.message());
  }
  auto bigram = BaselineLoss(**dataset, spec, /*print=*/true);
  if (!bigram.ok()) return Fail(2, bigram.status().message());

  data::Batch batch = (*dataset)->NewBatch(tr.batch_size());
  double last_val = NAN;
  for (int step = 1; step <= tr.steps(); ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    if (absl::Status s = (*dataset)->Next(tr.batch_size(), 0, &batch); !s.ok())
      return Fail(absl::IsInvalidArgument(s) ? 2 : 1, absl::StrCat("step ", step, ": data: ", s.message()));
    auto loss = t.Step(batch.x(), batch.y());
    if (!loss.ok()) return Fail(absl::IsInvalidArgument(loss.status()) ? 2 : 1, loss.status().message());
    if (world != nullptr) {
      if (absl::Status s = AverageLoss(t, *world, &*loss); !s.ok())
        return Fail(1, absl::StrCat("step ", step, ": averaging the loss across ranks: ", s.message()));
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (absl::Status s = report.Step(step, *loss, t.LearningRate(step), dt); !s.ok()) return Fail(1, s.message());
    if (step % tr.eval_every() == 0 || step == tr.steps()) {
      auto v = ValidationLoss(t, spec, **dataset);
      if (!v.ok()) return Fail(absl::IsInvalidArgument(v.status()) ? 2 : 1, v.status().message());
      last_val = *v;
      if (absl::Status s = report.Validation(step, *v, *bigram); !s.ok()) return Fail(1, s.message());
    }
  }
  if (absl::Status s = report.Finish(); !s.ok()) return Fail(1, s.message());
  if (absl::Status s = FinishWithSample(t, spec, **dataset, dir, last_val, *bigram); !s.ok())
    return Fail(1, s.message());
  return 0;
}

}  // namespace loom::train
