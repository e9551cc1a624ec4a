#include "runtime/launch/parallel_train.h"

#include "runtime/launch/parallel_ckpt.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/comm/communicator.h"
#include "compiler/schedule.h"
#include "dtensor/device_mesh.h"
#include "parallel/styles.h"
#include "parallel/trainer.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/plan/planner_command.h"
#include "runtime/data/dataset.h"
#include "dtensor/dtensor.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/onnx_model.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/train_data.h"
#include "runtime/train/trainer.h"

namespace loom::launch {
namespace {

int Fail(int rank, int code, absl::string_view msg) {
  std::fprintf(stderr, "loom worker (rank %d): %s\n", rank, std::string(msg).c_str());
  if (const char* f = std::getenv("LOOM_ERROR_FILE"); f != nullptr && *f) std::ofstream(f) << msg << "\n";
  return code;
}

// The rank's trainer. An imported model: every rank reads the file (a shared
// filesystem, inside the allowed roots), keeps its blocks of the initial
// values and drops the rest.
absl::StatusOr<std::unique_ptr<parallel::ParallelTrainer>> CreateTrainer(const v1::JobSpec& spec,
                                                                         const parallel::Layout& layout, int rank,
                                                                         const compiler::CommunicatorMap& comms) {
  parallel::ParallelTrainerOptions options;
  parallel::ImportedForward imported;
  if (spec.model().family() == "onnx") {
    LOOM_ASSIGN_OR_RETURN(train::OnnxTrainingModel loaded, train::LoadOnnxModel(spec));
    imported.forward = std::move(loaded.train_forward);
    imported.params = std::move(loaded.params);
    imported.initial = std::move(loaded.initial);
    options.imported = &imported;
  }
  return parallel::ParallelTrainer::Create(spec, layout, rank, comms, std::move(options));
}

// The step to continue after (0: none). Rank 0 first removes leftovers of
// interrupted saves and moves unusable checkpoints aside (they would block
// saving their steps again); then every rank loads the newest usable one.
absl::StatusOr<int64_t> Resume(const v1::JobSpec& spec, collectives::ProcessGroup& world, ParallelState& state,
                               data::Sampler* sampler) {
  const std::string& dir = spec.checkpoint().dir();
  if (dir.empty()) return 0;
  const int rank = world.rank();
  std::optional<checkpoint::LoadResult> latest;
  std::error_code ec;
  if (rank == 0 && std::filesystem::is_directory(dir, ec)) {
    LOOM_RETURN_IF_ERROR(checkpoint::CleanStale(dir));
    LOOM_ASSIGN_OR_RETURN(checkpoint::ResumePoint point, checkpoint::PrepareResume(dir));
    for (const std::string& q : point.quarantined) std::printf("unusable checkpoint moved aside: %s\n", q.c_str());
    latest = std::move(point.latest);
  }
  LOOM_ASSIGN_OR_RETURN(auto w, world.Barrier({}));
  LOOM_RETURN_IF_ERROR(Annotate(w->Wait(), "barrier before loading the checkpoint"));
  std::string log;
  LOOM_ASSIGN_OR_RETURN(int64_t step, state.Restore(dir, sampler, &log, latest ? &*latest : nullptr));
  if (rank == 0 && step > 0) {
    std::printf("%s; resuming at step %lld\n", log.c_str(), static_cast<long long>(step + 1));
    std::fflush(stdout);
    train::ReportProgress(step, step);
  }
  return step;
}

// Gathers the parameters (every rank takes part); with a reporter (rank 0),
// evaluates and samples on the full model in one process and closes the run.
absl::Status FinishRun(const v1::JobSpec& spec, parallel::ParallelTrainer& trainer, ParallelState& state,
                       const dtensor::DeviceMesh& mesh, const data::Dataset& dataset, train::RunReporter* report) {
  std::map<std::string, Tensor> full;
  const std::map<std::string, Tensor> local = state.LocalParameters();
  for (const models::ParamInfo& p : trainer.param_info()) {
    auto f = dtensor::FullTensor(local.at(p.name), std::vector<int64_t>(p.shape.begin(), p.shape.end()),
                                 trainer.specs().at(p.name), mesh);
    if (!f.ok()) return Annotate(f.status(), absl::StrCat("gathering ", p.name));
    if (report != nullptr) full[p.name] = std::move(*f);
  }
  if (report == nullptr) return absl::OkStatus();
  v1::JobSpec one = spec;
  one.mutable_parallel()->set_dp(1);
  one.mutable_parallel()->set_tp(1);
  one.mutable_parallel()->set_zero_stage(0);
  one.mutable_parallel()->set_sequence_parallel(false);
  train::TrainerOptions to;
  to.init = std::move(full);
  auto single = train::Trainer::Create(one, std::move(to));
  if (!single.ok()) return Annotate(single.status(), "evaluation model");
  LOOM_ASSIGN_OR_RETURN(double val, train::ValidationLoss(**single, spec, dataset));
  LOOM_ASSIGN_OR_RETURN(double bigram, train::BaselineLoss(dataset, spec, /*print=*/true));
  LOOM_RETURN_IF_ERROR(report->Validation(spec.train().steps(), val, bigram));
  LOOM_RETURN_IF_ERROR(report->Finish());
  return train::FinishWithSample(**single, spec, dataset, report->dir(), val, bigram);
}

}  // namespace

int RunParallelTraining(const v1::JobSpec& spec, std::shared_ptr<collectives::ProcessGroup> world,
                        checkpoint::CommitGate* gate, const parallel::Plan* plan) {
  const int rank = world->rank();
  const auto& tr = spec.train();
  const auto& m = spec.model();
  if (spec.device() == "cuda")
    return Fail(rank, 2,
                absl::StrCat("device: cuda: a GPU job runs one rank without checkpoints for now (world size ",
                             world->size(), spec.checkpoint().every() > 0 ? ", checkpoint.every set" : "",
                             "); data and tensor parallelism on GPUs and GPU checkpoints are not built yet"));
  const parallel::Layout layout = parallel::LayoutFromSpec(spec.parallel());
  // The data: every rank holds the same sampler state and reads only its
  // rows of each global batch (train_data.h, data/dataset.h).
  auto dataset = train::OpenTrainingData(spec, rank == 0);
  if (!dataset.ok()) return Fail(rank, 2, dataset.status().message());

  auto mesh = dtensor::DeviceMesh::Create(world, parallel::MeshOf(layout));
  if (!mesh.ok()) return Fail(rank, 2, absl::StrCat("device mesh: ", mesh.status().message()));
  std::vector<std::unique_ptr<compiler::Communicator>> owned;
  compiler::CommunicatorMap comms;
  for (int d = 0; d < (*mesh)->ndim(); ++d) {
    if ((*mesh)->shape().sizes[d] == 1) continue;
    owned.push_back(compiler::MakeProcessGroupCommunicator((*mesh)->group(d)));
    comms[(*mesh)->shape().names[d]] = owned.back().get();
  }
  if (rank == 0) {
    if (m.family() == "onnx") {
      std::printf("loom worker: onnx model %s; mesh %s over %d ranks\n", m.onnx().c_str(),
                  (*mesh)->shape().ToString().c_str(), world->size());
    } else {
      std::printf("loom worker: %s model, %d layers, d_model %d, %d heads; mesh %s over %d ranks\n",
                  m.family().c_str(), m.n_layer(), m.d_model(), m.n_head(), (*mesh)->shape().ToString().c_str(),
                  world->size());
    }
    std::printf("compiling...\n");
    std::fflush(stdout);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto trainer = CreateTrainer(spec, layout, rank, comms);
  if (!trainer.ok()) {
    bool config = absl::IsInvalidArgument(trainer.status()) || absl::IsUnimplemented(trainer.status());
    return Fail(rank, config ? 2 : 1, trainer.status().message());
  }
  std::unique_ptr<train::RunReporter> report;
  if (rank == 0) {
    double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("compiled in %.2fs\n", compile_s);
    const char* listen = std::getenv("LOOM_WORKER_METRICS_LISTEN");
    auto r = train::RunReporter::Open(spec, train::RunFolder(spec), listen != nullptr ? listen : "");
    if (!r.ok()) return Fail(rank, absl::IsInvalidArgument(r.status()) ? 2 : 1, r.status().message());
    report = std::move(*r);
    if (plan != nullptr)
      if (absl::Status s = plan::WritePlan(*plan, report->dir()); !s.ok()) return Fail(rank, 1, s.message());
  }
  // The training state (parameters, AdamW moments, step) with checkpoint save/resume
  // (parallel_ckpt.h): resumes from checkpoint.dir if it holds one, else starts from init_from.
  auto state = ParallelState::Create(spec, **trainer, (*mesh)->shape(), rank);
  if (!state.ok()) return Fail(rank, absl::IsInvalidArgument(state.status()) ? 2 : 1, state.status().message());
  const auto& ck = spec.checkpoint();
  auto resumed = Resume(spec, *world, **state, &(*dataset)->sampler());
  if (!resumed.ok()) return Fail(rank, 1, absl::StrCat("checkpoint.dir: ", resumed.status().message()));
  int64_t ckpt_step = *resumed;
  const auto [first_row, rows] = (*trainer)->BatchRows();
  data::Batch batch = (*dataset)->NewBatch(rows);
  for (int step = static_cast<int>(ckpt_step) + 1; step <= tr.steps(); ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    if (absl::Status s = (*dataset)->Next(tr.batch_size(), first_row, &batch); !s.ok())
      return Fail(rank, absl::IsInvalidArgument(s) ? 2 : 1, absl::StrCat("step ", step, ": data: ", s.message()));
    auto loss = (*state)->StepRows(batch.x(), batch.y());
    if (!loss.ok()) return Fail(rank, 1, absl::StrCat("step ", step, ": ", loss.status().message()));
    if (report) {
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      absl::Status s = report->Step(step, *loss, compiler::ScheduledLearningRate(tr, step), dt);
      if (!s.ok()) return Fail(rank, 1, s.message());
    }
    if (!ck.dir().empty() && ck.every() > 0 && step % ck.every() == 0) {
      absl::Status s =
          (*state)->Save(ck.dir(), (*dataset)->sampler().state(), ck.keep() > 0 ? ck.keep() : 3, *world, gate);
      if (!s.ok()) return Fail(rank, 1, absl::StrCat("checkpoint at step ", step, ": ", s.message()));
      ckpt_step = step;
    }
    if (rank == 0) train::ReportProgress(step, ckpt_step);
  }
  // The end of the run: every rank contributes its blocks of the parameters;
  // rank 0 evaluates and samples with the full model on one process.
  if (absl::Status s = FinishRun(spec, **trainer, **state, **mesh, **dataset, report.get()); !s.ok())
    return Fail(rank, absl::IsInvalidArgument(s) ? 2 : 1, s.message());
  // Nobody leaves before everyone is done (a late peer's last collective).
  auto w = world->Barrier({});
  if (w.ok()) (void)(*w)->Wait();
  return 0;
}

}  // namespace loom::launch
