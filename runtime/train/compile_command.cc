#include "runtime/train/compile_command.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/models/models.h"
#include "parallel/styles.h"
#include "parallel/trainer.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/job_model.h"
#include "runtime/train/onnx_model.h"

namespace loom::runtime::train {
namespace {
int Fail(int code, absl::string_view msg) {
  std::fprintf(stderr, "loom compile: %s\n", std::string(msg).c_str());
  return code;
}

// --dump=cuda: the CUDA executor's launch plan of the job's training step
// (rank 0's under a parallel layout) and its device memory by kind, from a
// dry build: whether the job fits, without a GPU.
int DumpCuda(const v1::JobSpec& spec) {
  auto model = BuildModel(spec);
  if (!model.ok()) return Fail(2, model.status().message());
  auto step = parallel::CompileCudaStep(spec, *model);
  if (!step.ok()) return Fail(absl::IsInvalidArgument(step.status()) ? 2 : 1, step.status().message());
  const compiler::cuda::CudaOptions o = parallel::CudaStepOptions(spec);
  auto plan = compiler::cuda::PlanCuda(*step, o.bf16, compiler::cuda::PlanOptionsFor(o));
  if (!plan.ok()) return Fail(1, plan.status().message());
  auto stats = compiler::cuda::DryBuild(*step, o);
  if (!stats.ok()) return Fail(1, stats.status().message());
  std::printf("# CUDA plan of %s: %zu launches, %s%s%s, train.memory %s%s\n", spec.name().c_str(),
              plan->launches.size(), o.bf16 ? "bf16" : "f32", o.f32_residual ? " (f32 residual stream)" : "",
              o.bf16_grads ? " (bf16 gradients)" : "",
              spec.train().memory().empty() ? "standard" : spec.train().memory().c_str(),
              o.offload_optimizer_state ? ", optimizer state on the host" : "");
  std::fputs(plan->Describe().c_str(), stdout);
  const compiler::cuda::CudaBuildStats::Memory& m = stats->memory;
  auto gib = [](int64_t b) { return b / double(1 << 30); };
  std::printf("# device memory (GiB): parameters %.3f, bf16 shadows %.3f, optimizer state %.3f, other inputs %.3f, "
              "arena (activations, gradients) %.3f, scratch %.3f, total %.3f; optimizer state on the host %.3f\n",
              gib(m.params), gib(m.shadows), gib(m.states), gib(m.other_inputs), gib(m.arena), gib(m.scratch),
              gib(m.total), gib(m.host_states));
  return 0;
}
}  // namespace

int RunCompileCommand(const std::vector<std::string>& args) {
  std::string stage = "fused";
  std::vector<std::string> positional;
  FlagSet fs("loom compile", "JOB.yaml", "Prints the job's graph as Loom IR after a compiler stage.");
  fs.String("dump", &stage, "STAGE",
            absl::StrCat("the stage to print: ", absl::StrJoin(compiler::StageNames(), ", "),
                         ", parallel, or cuda (the CUDA launch plan and its device memory; default fused)"))
      .Positionals(&positional, "JOB.yaml", 1, 1);
  if (std::optional<int> rc = fs.Parse(args)) return *rc;
  const std::string& path = positional[0];
  const auto& stages = compiler::StageNames();
  // "parallel": the joint graph after sharding propagation with the job's
  // parallel section (parallel/styles.h), placements and collectives shown.
  if (stage != "parallel" && stage != "cuda" && std::find(stages.begin(), stages.end(), stage) == stages.end())
    return Fail(2, absl::StrCat("--dump: unknown stage '", stage, "' (stages: ", absl::StrJoin(stages, ", "),
                                ", parallel, cuda)"));
  auto spec = jobspec::LoadJobSpec(path);
  if (!spec.ok()) return Fail(2, spec.status().message());
  if (stage == "cuda") return DumpCuda(*spec);
  const compiler::models::BuildOptions bo = compiler::models::TrainingOptions(*spec);
  absl::StatusOr<compiler::ir::Graph> forward;
  std::string header;  // an ONNX job: what the recovery passes matched, as IR comments
  if (spec->model().family() == "onnx") {  // the imported graph, as the trainer builds it
    auto onnx = LoadOnnxModel(*spec);
    forward = onnx.ok() ? absl::StatusOr<compiler::ir::Graph>(std::move(onnx->train_forward)) : onnx.status();
    if (onnx.ok()) {
      header = absl::StrCat("# recovery passes (compiler/passes/recover.h): ", onnx->report.patterns.size(),
                            " patterns matched\n");
      for (const std::string& p : onnx->report.patterns) absl::StrAppend(&header, "#   ", p, "\n");
    }
  } else {
    forward = compiler::models::BuildForward(spec->model(), bo);
  }
  if (!forward.ok()) return Fail(2, forward.status().message());
  compiler::CompileOptions co;
  compiler::AdamWOptions adam;
  adam.beta1 = spec->train().beta1();
  adam.beta2 = spec->train().beta2();
  adam.eps = spec->train().eps();
  adam.weight_decay = spec->train().weight_decay();
  adam.max_norm = spec->train().grad_clip();
  co.adamw = adam;
  if (const std::string& ac = spec->train().activation_checkpointing();
      (ac == "blocks" || ac == "selective") && spec->model().family() != "onnx") {
    co.checkpoint_blocks = compiler::models::BlockOfParameter;
    co.checkpoint_selective = ac == "selective";
  }
  co.lower = false;
  const parallel::Layout layout = parallel::LayoutFromSpec(spec->parallel());
  auto c = stage == "parallel"
               ? parallel::CompileParallel(*forward, co, spec->model(), bo.batch, layout,
                                           parallel::DpBucketBytes(*spec))
               : compiler::Compile(*forward, co);
  if (!c.ok()) return Fail(absl::IsInvalidArgument(c.status()) ? 2 : 1, c.status().message());
  if (stage == "parallel")
    std::printf("# mesh %s, zero_stage=%d, sequence_parallel=%s; value types are per-rank (local) shapes\n",
                parallel::MeshOf(layout).ToString().c_str(), layout.zero_stage,
                layout.sequence_parallel ? "true" : "false");
  auto text = c->Dump(stage);
  if (!text.ok()) return Fail(2, text.status().message());
  std::fputs(header.c_str(), stdout);
  std::fputs(text->c_str(), stdout);
  return 0;
}

}  // namespace loom::runtime::train
