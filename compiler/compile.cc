#include "compiler/compile.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/checkpointing.h"
#include "compiler/passes/cse.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/memory_plan.h"
#include "compiler/passes/simplify.h"

namespace loom::compiler {

const std::vector<std::string>& StageNames() {
  static const auto* names = new std::vector<std::string>{"initial", "joint", "optimized", "fused", "planned"};
  return *names;
}

absl::StatusOr<std::string> Compilation::Dump(absl::string_view stage) const {
  auto it = stages.find(std::string(stage));
  if (it == stages.end())
    return absl::InvalidArgumentError(
        absl::StrCat("dump: unknown stage '", stage, "' (stages: ", absl::StrJoin(StageNames(), ", "), ")"));
  if (stage != "planned") return ir::PrintGraph(it->second);
  const ir::Graph& g = it->second;
  ir::PrintOptions opt;
  opt.node_comment = [&](int node) { return plan.Describe(g, node); };
  return absl::StrCat("# arena: peak_bytes=", plan.peak_bytes, " liveness_bound=", plan.live_bytes_bound,
                      " alignment=", plan.alignment, "\n", ir::PrintGraph(g, opt));
}

absl::StatusOr<Compilation> Compile(const ir::Graph& forward, const CompileOptions& options) {
  LOOM_RETURN_IF_ERROR(Annotate(ir::Verify(forward), "compile: initial graph"));
  Compilation c;
  c.stages["initial"] = forward;
  ir::Graph g = forward;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  if (options.differentiate) {
    auto t0 = Clock::now();
    auto j = BuildJointGraph(forward, options.autodiff);
    if (!j.ok()) return Annotate(j.status(), "compile: autodiff");
    c.autodiff_seconds = since(t0);
    t0 = Clock::now();
    if (options.adamw) LOOM_RETURN_IF_ERROR(Annotate(AppendAdamW(*j, *options.adamw), "compile: optimizer"));
    c.optimizer_seconds = since(t0);
    g = std::move(j->graph);
  }
  c.stages["joint"] = g;
  passes::PassPipeline opt;
  if (options.simplify) opt.Add<passes::AlgebraicSimplification>();
  if (options.cse) opt.Add<passes::CommonSubexpressionElimination>();
  if (options.dce) opt.Add<passes::DeadCodeElimination>();
  if (options.cast_policy) opt.Add<passes::CastPolicyPass>(options.cast_policy);
  if (options.checkpoint_blocks)
    opt.Add<passes::ActivationCheckpointing>(options.checkpoint_blocks, options.checkpoint_selective)
        .Add<passes::DeadCodeElimination>();
  LOOM_ASSIGN_OR_RETURN(c.reports, opt.Run(g));
  c.stages["optimized"] = g;
  if (options.fuse) {
    passes::PassPipeline fuse;
    fuse.Add<passes::ElementwiseFusion>();
    LOOM_ASSIGN_OR_RETURN(std::vector<passes::PassReport> r, fuse.Run(g));
    c.reports.insert(c.reports.end(), r.begin(), r.end());
  }
  c.stages["fused"] = g;
  passes::MemoryPlanPass plan;
  const auto t_plan = Clock::now();
  LOOM_ASSIGN_OR_RETURN(bool changed, plan.Run(g));
  c.reports.push_back({std::string(plan.name()), changed, since(t_plan)});
  c.plan = plan.plan();
  c.stages["planned"] = g;
  if (options.lower) {
    auto p = Lower(g, options.lowering);
    if (!p.ok()) return Annotate(p.status(), "compile: lowering");
    c.program = std::move(*p);
  }
  return c;
}

}  // namespace loom::compiler
