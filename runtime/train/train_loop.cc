#include "runtime/train/train_loop.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "dtensor/dtensor.h"
#include "parallel/trainer.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/init_from.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/data/dataset.h"
#include "runtime/plan/planner_command.h"
#include "runtime/train/checkpointer.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/job_model.h"
#include "runtime/train/run_reporter.h"
#include "runtime/train/train_data.h"

namespace loom::runtime::train {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bad input or configuration (exit 2), else a runtime failure (exit 1).
int ExitCode(const absl::Status& s) { return absl::IsInvalidArgument(s) || absl::IsUnimplemented(s) ? 2 : 1; }

// The loss of the step just run, averaged across the world's ranks on the GPU
// (the process group's CUDA backend), written back into *loss.
absl::Status AverageLoss(parallel::Trainer& t, collectives::ProcessGroup& world, float* loss) {
  LOOM_ASSIGN_OR_RETURN(Tensor dev, t.DeviceLoss());
  collectives::AllReduceOptions o;
  o.op = collectives::ReduceOp::kAvg;
  LOOM_ASSIGN_OR_RETURN(collectives::WorkPtr w, world.AllReduce(dev, o));
  LOOM_RETURN_IF_ERROR(w->Wait());
  LOOM_ASSIGN_OR_RETURN(*loss, t.ReadLoss());
  return absl::OkStatus();
}

// init_from as the trainer's source of initial blocks: each rank reads only
// its block of each parameter (one process: the whole parameters).
absl::StatusOr<parallel::InitBlockFn> InitBlocks(const v1::JobSpec& spec, bool lead) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<checkpoint::InitSource> source,
                        checkpoint::InitSource::Open(spec.init_from(), spec.model()));
  if (lead) {
    std::printf("initial parameters: %s\n", source->Describe().c_str());
    std::fflush(stdout);
  }
  return [source](const std::string& param, const std::vector<int64_t>& offsets,
                  const std::vector<int64_t>& lengths) { return source->ReadBlock(param, offsets, lengths); };
}

// Whether checkpoint.dir holds a checkpoint to resume.
absl::StatusOr<bool> WillResume(const v1::JobSpec& spec) {
  const std::string& dir = spec.checkpoint().dir();
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return false;
  LOOM_ASSIGN_OR_RETURN(auto list, checkpoint::ListCheckpoints(dir));
  return !list.empty();
}

// One run of RunTraining: the phases in order, each returning what failed.
class Session {
 public:
  explicit Session(const TrainingRun& run) : run_(run), spec_(run.spec), lead_(run.rank == 0) {}
  int Run();

 private:
  int Fail(int code, absl::string_view msg) const;
  absl::Status LoadData();
  void PrintBanner() const;
  absl::Status BuildTrainer();
  absl::Status OpenReporter();
  absl::Status Resume();
  absl::Status Loop();
  absl::Status Validate(int64_t step);
  absl::StatusOr<std::map<std::string, Tensor>> WholeParameters() const;
  absl::Status Finish();

  const TrainingRun& run_;
  const v1::JobSpec& spec_;
  const bool lead_;  // rank 0 reports
  std::unique_ptr<data::Dataset> dataset_;
  std::unique_ptr<parallel::Trainer> trainer_;
  std::unique_ptr<Checkpointer> ckpt_;
  std::unique_ptr<RunReporter> report_;
  bool average_loss_ = false;  // device: cuda under a process group
  double bigram_ = NAN;
  double last_val_ = NAN;
  int64_t ckpt_step_ = -1;  // -1: checkpoints are off
};

int Session::Fail(int code, absl::string_view msg) const {
  std::string who = run_.command;
  if (run_.world != nullptr && run_.world->size() > 1) absl::StrAppend(&who, " (rank ", run_.rank, ")");
  return FailRun(who, code, msg);
}

int Session::Run() {
  if (lead_) PrintBanner();
  if (absl::Status s = LoadData(); !s.ok()) return Fail(2, s.message());
  if (lead_) {
    std::printf("compiling...\n");
    std::fflush(stdout);
  }
  if (absl::Status s = BuildTrainer(); !s.ok()) return Fail(ExitCode(s), s.message());
  if (absl::Status s = OpenReporter(); !s.ok()) return Fail(ExitCode(s), s.message());
  if (absl::Status s = Resume(); !s.ok()) return Fail(1, s.message());
  if (absl::Status s = Loop(); !s.ok()) return Fail(ExitCode(s), s.message());
  if (absl::Status s = Finish(); !s.ok()) return Fail(1, s.message());
  return 0;
}

absl::Status Session::LoadData() {
  LOOM_ASSIGN_OR_RETURN(dataset_, OpenTrainingData(spec_, lead_));
  return absl::OkStatus();
}

void Session::PrintBanner() const {
  const auto& m = spec_.model();
  const std::string& cmd = run_.command;
  if (m.family() == "onnx") {
    std::printf("%s: onnx model %s, seq_len %d, vocab %d", cmd.c_str(), m.onnx().c_str(), m.seq_len(), m.vocab());
  } else {
    std::printf("%s: %s model, %d layers, d_model %d, %d heads, seq_len %d, vocab %d", cmd.c_str(),
                m.family().c_str(), m.n_layer(), m.d_model(), m.n_head(), m.seq_len(), m.vocab());
  }
  const dtensor::MeshShape mesh = parallel::MeshOf(parallel::LayoutFromSpec(spec_.parallel()));
  if (mesh.num_ranks() > 1)
    std::printf("; mesh %s over %lld ranks", mesh.ToString().c_str(), static_cast<long long>(mesh.num_ranks()));
  std::printf("\n");
  std::fflush(stdout);
}

absl::Status Session::BuildTrainer() {
  const auto t0 = Clock::now();
  parallel::TrainerOptions o;
  o.layout = parallel::LayoutFromSpec(spec_.parallel());
  o.rank = run_.rank;
  o.comms = run_.comms;
  o.cuda_device = run_.cuda_device;
  LOOM_ASSIGN_OR_RETURN(const bool resume, WillResume(spec_));
  if (!spec_.init_from().empty() && !resume) {
    LOOM_ASSIGN_OR_RETURN(o.init_blocks, InitBlocks(spec_, lead_));
  }
  LOOM_ASSIGN_OR_RETURN(parallel::TrainerModel model, BuildModel(spec_));
  LOOM_ASSIGN_OR_RETURN(trainer_, parallel::Trainer::Create(spec_, std::move(model), std::move(o)));
  if (trainer_->mesh().num_ranks() > 1 && run_.mesh == nullptr)
    return absl::InternalError("a parallel layout needs the device mesh of its ranks");
  if (!spec_.checkpoint().dir().empty()) {
    LOOM_ASSIGN_OR_RETURN(ckpt_, Checkpointer::Create(spec_, *trainer_, run_.world));
  }
  if (lead_ && spec_.device() == "cuda") {
    std::printf("compiled in %.2fs: %.2fM parameters, device cuda, precision %s\n", SecondsSince(t0),
                trainer_->num_parameters() / 1e6, spec_.train().precision().c_str());
  } else if (lead_) {
    std::printf("compiled in %.2fs: %.2fM parameters, training arena %.1f MiB, %d threads\n", SecondsSince(t0),
                trainer_->num_parameters() / 1e6, trainer_->compilation().plan.peak_bytes / 1048576.0, NumThreads());
  }
  // On a mesh of several ranks the program's loss is already the global one.
  average_loss_ = spec_.device() == "cuda" && run_.world != nullptr && trainer_->mesh().num_ranks() == 1;
  if (spec_.device() == "cuda" && run_.world != nullptr) {
    auto b = run_.world->BackendFor(Device::CUDA(run_.cuda_device), collectives::OpType::kAllReduce, DType::kF32);
    if (!b.ok()) return absl::InternalError(absl::StrCat("process group: no CUDA backend: ", b.status().message()));
    std::printf("process group: rank %d of %d, CUDA collectives through %s\n", run_.world->rank(),
                run_.world->size(), std::string((*b)->name()).c_str());
  }
  return absl::OkStatus();
}

absl::Status Session::OpenReporter() {
  if (!lead_) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(report_, RunReporter::Open(spec_, run_.run_dir, run_.metrics_listen));
  if (run_.plan != nullptr)
    LOOM_RETURN_IF_ERROR(Annotate(plan::WritePlan(*run_.plan, report_->dir()), "writing the plan"));
  auto bigram = BaselineLoss(*dataset_, spec_, /*print=*/true);
  if (!bigram.ok()) return absl::InvalidArgumentError(bigram.status().message());
  bigram_ = *bigram;
  return absl::OkStatus();
}

absl::Status Session::Resume() {
  if (!ckpt_) return absl::OkStatus();
  const std::string& dir = spec_.checkpoint().dir();
  ckpt_step_ = 0;
  // Rank 0 removes leftovers of interrupted saves and moves unusable
  // checkpoints aside (they would block saving their steps again).
  std::optional<checkpoint::LoadResult> latest;
  std::error_code ec;
  if (lead_ && std::filesystem::is_directory(dir, ec)) {
    LOOM_RETURN_IF_ERROR(Annotate(checkpoint::CleanStale(dir), "checkpoint.dir"));
    auto point = checkpoint::PrepareResume(dir);
    if (!point.ok()) return Annotate(point.status(), "checkpoint.dir");
    for (const std::string& q : point->quarantined) std::printf("unusable checkpoint moved aside: %s\n", q.c_str());
    latest = std::move(point->latest);
  }
  if (run_.world != nullptr) {
    auto w = run_.world->Barrier({});
    if (!w.ok() || !(*w)->Wait().ok()) return absl::InternalError("barrier before loading the checkpoint failed");
  }
  std::string log;
  auto resumed = ckpt_->Restore(dir, &dataset_->sampler(), &log, latest ? &*latest : nullptr);
  if (!resumed.ok()) return Annotate(resumed.status(), "checkpoint.dir");
  ckpt_step_ = *resumed;
  if (lead_ && ckpt_step_ > 0) {
    std::printf("%s; resuming at step %lld\n", log.c_str(), static_cast<long long>(ckpt_step_ + 1));
    std::fflush(stdout);
    ReportProgress(ckpt_step_, ckpt_step_);
  }
  return absl::OkStatus();
}

absl::Status Session::Validate(int64_t step) {
  LOOM_ASSIGN_OR_RETURN(last_val_, ValidationLoss(*trainer_, spec_, *dataset_));
  if (report_) LOOM_RETURN_IF_ERROR(report_->Validation(step, last_val_, bigram_));
  return absl::OkStatus();
}

absl::Status Session::Loop() {
  const auto& tr = spec_.train();
  const auto& ck = spec_.checkpoint();
  // This rank reads only its rows of each global batch.
  const auto [first_row, rows] = trainer_->BatchRows();
  data::Batch batch = dataset_->NewBatch(rows);
  for (int64_t step = trainer_->step() + 1; step <= tr.steps(); ++step) {
    const auto start = Clock::now();
    LOOM_RETURN_IF_ERROR(
        Annotate(dataset_->Next(tr.batch_size(), first_row, &batch), absl::StrCat("step ", step, ": data")));
    auto loss = trainer_->StepRows({{"x", batch.x()}, {"y", batch.y()}});
    if (!loss.ok()) return Annotate(loss.status(), absl::StrCat("step ", step));
    if (average_loss_)
      LOOM_RETURN_IF_ERROR(Annotate(AverageLoss(*trainer_, *run_.world, &*loss),
                                    absl::StrCat("step ", step, ": averaging the loss across ranks")));
    if (report_) {
      LOOM_RETURN_IF_ERROR(report_->Step(step, *loss, trainer_->LearningRate(step), SecondsSince(start)));
    } else {  // the other ranks' own step times (the loss and rate are rank 0's)
      ReportMetricLine(absl::StrFormat("{\"step\": %d, \"step_time_ms\": %.3f}", step, SecondsSince(start) * 1000));
    }
    if (ckpt_ && ck.every() > 0 && step % ck.every() == 0) {
      absl::Status s = ckpt_->Save(ck.dir(), dataset_->sampler().state(), ck.keep() > 0 ? ck.keep() : 3, run_.gate);
      LOOM_RETURN_IF_ERROR(Annotate(s, absl::StrCat("checkpoint at step ", step)));
      ckpt_step_ = step;
    }
    if (lead_ && ckpt_) ReportProgress(step, ckpt_step_);
    if (step % tr.eval_every() == 0 || step == tr.steps()) LOOM_RETURN_IF_ERROR(Validate(step));
  }
  // A run resumed at its last step has trained nothing here: validate anyway.
  if (std::isnan(last_val_)) LOOM_RETURN_IF_ERROR(Validate(tr.steps()));
  return absl::OkStatus();
}

// Every parameter whole, on rank 0 (each rank contributes its blocks; on a
// mesh of several ranks this is collective).
absl::StatusOr<std::map<std::string, Tensor>> Session::WholeParameters() const {
  if (trainer_->mesh().num_ranks() == 1) return trainer_->Parameters();
  std::map<std::string, Tensor> whole;
  const std::map<std::string, Tensor> local = trainer_->LocalParameters();
  for (const compiler::models::ParamInfo& p : trainer_->param_info()) {
    auto f = dtensor::FullTensor(local.at(p.name), std::vector<int64_t>(p.shape.begin(), p.shape.end()),
                                 trainer_->specs().at(p.name), *run_.mesh);
    if (!f.ok()) return Annotate(f.status(), absl::StrCat("gathering ", p.name));
    if (lead_) whole[p.name] = std::move(*f);
  }
  return whole;
}

absl::Status Session::Finish() {
  if (report_) LOOM_RETURN_IF_ERROR(report_->Finish());
  LOOM_ASSIGN_OR_RETURN(auto params, WholeParameters());
  LOOM_RETURN_IF_ERROR(
      FinishWithSample(*trainer_, spec_, *dataset_, params, report_ ? report_->dir() : "", last_val_, bigram_));
  // Nobody leaves before everyone is done (a late peer's last collective).
  if (run_.world != nullptr) {
    auto w = run_.world->Barrier({});
    if (w.ok()) (void)(*w)->Wait();
  }
  return absl::OkStatus();
}

}  // namespace

int FailRun(absl::string_view who, int code, absl::string_view msg) {
  std::fprintf(stderr, "%s: %s\n", std::string(who).c_str(), std::string(msg).c_str());
  if (const char* f = std::getenv("LOOM_ERROR_FILE"); f != nullptr && *f) std::ofstream(f) << msg << "\n";
  return code;
}

int RunTraining(const TrainingRun& run) { return Session(run).Run(); }

}  // namespace loom::runtime::train
