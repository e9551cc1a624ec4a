#include "parallel/styles.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"
#include "compiler/spmd/bucketing.h"
#include "compiler/spmd/schedule.h"

namespace loom::parallel {

using dtensor::DTensorSpec;
using dtensor::Placement;

Layout LayoutFromSpec(const v1::ParallelSpec& p) {
  Layout l;
  l.dp = p.dp() > 0 ? p.dp() : 1;
  l.tp = p.tp() > 0 ? p.tp() : 1;
  l.zero_stage = p.zero_stage();
  l.sequence_parallel = p.sequence_parallel();
  l.tp_plan = TpPlanFromSpec(p);
  return l;
}

dtensor::MeshShape MeshOf(const Layout& l) { return {{"dp", "tp"}, {l.dp, l.tp}}; }

namespace {

// Tensor-parallel placement (along tp) of a parameter, by name.
Placement TpPlacement(const std::string& name, const std::string& family) {
  auto ends = [&](absl::string_view s) { return absl::EndsWith(name, s); };
  if (family == "gpt") {
    if (ends("attn.c_attn.weight") || ends("mlp.c_fc.weight")) return Placement::Shard(1);
    if (ends("attn.c_attn.bias") || ends("mlp.c_fc.bias")) return Placement::Shard(0);
    if (ends("attn.c_proj.weight") || ends("mlp.c_proj.weight")) return Placement::Shard(0);
    if (name == "wte") return Placement::Shard(0);
  } else {
    if (ends("attention.wq") || ends("attention.wk") || ends("attention.wv") || ends("feed_forward.w1") ||
        ends("feed_forward.w3"))
      return Placement::Shard(1);
    if (ends("attention.wo") || ends("feed_forward.w2")) return Placement::Shard(0);
    if (name == "tok_embeddings") return Placement::Shard(0);
    if (name == "output") return Placement::Shard(1);
  }
  return Placement::Replicate();
}

// The dp shard of a [param-shaped] tensor for ZeRO: the first dim tp does not
// split that dp divides (else R).
Placement ZeroPlacement(const Shape& shape, const Placement& tp, int64_t tp_size, int64_t dp) {
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (tp.is_shard(d)) continue;
    if (shape[d] % dp == 0 && shape[d] >= dp) return Placement::Shard(d);
  }
  (void)tp_size;
  return Placement::Replicate();
}

}  // namespace

absl::StatusOr<std::vector<TpAssignment>> TensorParallelPlan(const v1::ModelSpec& model,
                                                             const compiler::ir::Graph& forward, const Layout& l) {
  if (model.family() == "onnx") return ResolveTpPlan(forward, l.tp_plan, l.tp);
  std::vector<TpAssignment> out;
  for (const auto& in : forward.inputs()) {
    if (in.kind != compiler::ir::InputKind::kParam) continue;
    TpAssignment a;
    a.param = in.name;
    a.shape = forward.meta(in.value).shape;
    a.style = "megatron";
    a.placement = l.tp > 1 ? TpPlacement(in.name, model.family()) : Placement::Replicate();
    out.push_back(std::move(a));
  }
  return out;
}

absl::StatusOr<std::map<std::string, DTensorSpec>> AnnotateInputs(const std::vector<TpAssignment>& tp,
                                                                  const compiler::ir::Graph& joint, const Layout& l) {
  const dtensor::MeshShape mesh = MeshOf(l);
  std::map<std::string, DTensorSpec> out;
  std::map<std::string, Placement> tp_of;  // param name -> its tp placement
  for (const TpAssignment& a : tp) tp_of[a.param] = a.placement;
  for (const auto& in : joint.inputs()) {
    const Shape& shape = joint.meta(in.value).shape;
    DTensorSpec s = DTensorSpec::Replicated(mesh);
    if (in.name == "x" || in.name == "y") {
      s.placements[0] = Placement::Shard(0);
      // Sequence parallel: tokens split by position over tp, so the embedding
      // output and the residual stream (norm / residual regions) are S(1) on
      // tp; the matmul rule gathers them before colwise weights and the
      // rowwise partial sums come back by reduce_scatter.
      if (l.sequence_parallel && l.tp > 1) s.placements[1] = Placement::Shard(1);
    } else {
      std::string param = in.name;
      bool state = false;
      if (in.kind == compiler::ir::InputKind::kState && (absl::EndsWith(param, ".m") || absl::EndsWith(param, ".v"))) {
        param = param.substr(0, param.size() - 2);
        state = true;
      }
      auto it = tp_of.find(param);
      if (it == tp_of.end() || (!state && in.kind != compiler::ir::InputKind::kParam)) {
        out[in.name] = s;
        continue;
      }
      if (l.tp > 1) s.placements[1] = it->second;
      const bool zero = (state && l.zero_stage >= 1) || (!state && l.zero_stage >= 3);
      if (zero && l.dp > 1) s.placements[0] = ZeroPlacement(shape, s.placements[1], l.tp, l.dp);
    }
    LOOM_RETURN_IF_ERROR(Annotate(s.Validate(static_cast<int>(shape.size())), absl::StrCat("input '", in.name, "'")));
    for (int k = 0; k < 2; ++k)
      if (s.placements[k].is_shard() && shape[s.placements[k].dim] % mesh.sizes[k] != 0)
        return absl::InvalidArgumentError(absl::StrCat("parallel layout: input '", in.name, "' ",
                                                       ShapeToString(shape), " does not split evenly as ",
                                                       s.ToString()));
    out[in.name] = s;
  }
  return out;
}

compiler::spmd::SpmdOptions SpmdOptionsFor(const Layout& l, std::map<std::string, DTensorSpec> inputs) {
  compiler::spmd::SpmdOptions o;
  o.mesh = MeshOf(l);
  o.inputs = std::move(inputs);
  o.reduce_scatter_grads = l.zero_stage != 1;
  o.reuse_input_redistributions = l.zero_stage < 3;  // FSDP: gather per use, free after
  return o;
}

absl::StatusOr<compiler::Compilation> CompileParallel(const compiler::ir::Graph& forward,
                                                      const compiler::CompileOptions& co, const v1::ModelSpec& model,
                                                      int64_t batch, const Layout& layout, int64_t bucket_bytes) {
  LOOM_RETURN_IF_ERROR(CheckParallelLayout(model, batch, layout));
  if (!co.differentiate && co.adamw.has_value())
    return absl::InvalidArgumentError(
        "CompileParallel: adamw needs differentiate (a training compile sets both, a micro-step differentiate "
        "only, an evaluation compile neither)");
  LOOM_RETURN_IF_ERROR(Annotate(compiler::ir::Verify(forward), "compile: initial graph"));
  compiler::ir::Graph global = forward;  // what sharding propagation localizes
  std::set<int> unreduced;               // a micro-step's gradient outputs
  if (co.differentiate) {
    auto j = compiler::BuildJointGraph(forward, co.autodiff);
    if (!j.ok()) return Annotate(j.status(), "compile: autodiff");
    if (co.adamw) {
      LOOM_RETURN_IF_ERROR(Annotate(compiler::AppendAdamW(*j, *co.adamw), "compile: optimizer"));
    } else {
      for (size_t g = 0; g < j->grads.size(); ++g) unreduced.insert(j->num_forward_outputs + static_cast<int>(g));
    }
    global = std::move(j->graph);
  }
  LOOM_ASSIGN_OR_RETURN(auto tp, TensorParallelPlan(model, forward, layout));
  LOOM_ASSIGN_OR_RETURN(auto specs, AnnotateInputs(tp, global, layout));
  compiler::spmd::SpmdStats stats;
  compiler::spmd::SpmdOptions so = SpmdOptionsFor(layout, std::move(specs));
  so.unreduced_outputs = std::move(unreduced);
  auto local = compiler::spmd::Parallelize(global, so, &stats);
  if (!local.ok()) return Annotate(local.status(), "compile: sharding propagation");
  // The tp plan is held to its placements in the training step; an evaluation
  // program under the same plan may gather what it needs.
  if (co.differentiate && model.family() == "onnx" && layout.tp > 1)
    LOOM_RETURN_IF_ERROR(CheckTpPlanHonoured(global, stats, 1, tp));
  if (co.differentiate && layout.dp > 1 && bucket_bytes > 0) {  // DDP-style buckets for the dp gradient all-reduces
    compiler::spmd::BucketOptions bo;
    bo.group = "dp";
    bo.bucket_bytes = bucket_bytes;
    auto b = compiler::spmd::BucketAllReduces(*local, bo);
    if (!b.ok()) return Annotate(b.status(), "compile: gradient bucketing");
  }
  // Gradient reductions right after their producers (compiler/spmd/schedule.h).
  if (auto s = compiler::spmd::ScheduleCollectivesEarly(*local); !s.ok())
    return Annotate(s.status(), "compile: collective scheduling");
  compiler::CompileOptions rest = co;
  rest.differentiate = false;
  rest.adamw.reset();
  auto c = compiler::Compile(*local, rest);
  if (!c.ok()) return c.status();
  c->stages["initial"] = forward;
  c->stages["joint"] = std::move(global);
  c->stages["parallel"] = *local;
  return c;
}

absl::StatusOr<compiler::Compilation> CompileParallelUpdate(
    const compiler::ir::Graph& update, const compiler::CompileOptions& co, const std::vector<TpAssignment>& tp,
    const Layout& layout, const std::map<std::string, dtensor::DTensorSpec>& gradient_specs) {
  if (co.differentiate || co.adamw)
    return absl::InvalidArgumentError("CompileParallelUpdate: the update graph carries its optimizer already");
  LOOM_RETURN_IF_ERROR(Annotate(compiler::ir::Verify(update), "compile: update graph"));
  LOOM_ASSIGN_OR_RETURN(auto specs, AnnotateInputs(tp, update, layout));
  for (const auto& [name, s] : gradient_specs) {
    if (update.FindInput(name) < 0)
      return absl::InvalidArgumentError(absl::StrCat("CompileParallelUpdate: no update input '", name, "'"));
    specs[name] = s;
  }
  auto local = compiler::spmd::Parallelize(update, SpmdOptionsFor(layout, std::move(specs)));
  if (!local.ok()) return Annotate(local.status(), "compile: sharding propagation of the update");
  if (auto s = compiler::spmd::ScheduleCollectivesEarly(*local); !s.ok())
    return Annotate(s.status(), "compile: collective scheduling of the update");
  auto c = compiler::Compile(*local, co);
  if (!c.ok()) return c.status();
  c->stages["joint"] = update;
  c->stages["parallel"] = *local;
  return c;
}

absl::StatusOr<FittedTpPlan> FitTpPlan(const compiler::ir::Graph& forward, const compiler::CompileOptions& co,
                                       const v1::ModelSpec& model, int64_t batch, const Layout& layout_in) {
  if (model.family() != "onnx" || layout_in.tp < 2)
    return absl::InvalidArgumentError("FitTpPlan: needs an imported model and tp > 1");
  if (!co.differentiate || !co.adamw) return absl::InvalidArgumentError("FitTpPlan: needs a training compile");
  auto j = compiler::BuildJointGraph(forward, co.autodiff);
  if (!j.ok()) return Annotate(j.status(), "compile: autodiff");
  LOOM_RETURN_IF_ERROR(Annotate(compiler::AppendAdamW(*j, *co.adamw), "compile: optimizer"));
  FittedTpPlan fit;
  fit.assignments = ProposeTpAssignments(forward, layout_in.tp);
  Layout layout = layout_in;
  // Each round either holds or replicates one more parameter: at most one
  // round per parameter.
  for (size_t round = 0; round <= fit.assignments.size(); ++round) {
    fit.rules = RulesFor(fit.assignments);
    layout.tp_plan = fit.rules;
    LOOM_RETURN_IF_ERROR(CheckParallelLayout(model, batch, layout));
    LOOM_ASSIGN_OR_RETURN(fit.assignments, ResolveTpPlan(forward, fit.rules, layout.tp));
    LOOM_ASSIGN_OR_RETURN(auto specs, AnnotateInputs(fit.assignments, j->graph, layout));
    compiler::spmd::SpmdStats stats;
    auto local = compiler::spmd::Parallelize(j->graph, SpmdOptionsFor(layout, std::move(specs)), &stats);
    if (!local.ok()) return Annotate(local.status(), "parallel.tp: auto: sharding propagation");
    std::string param;
    if (CheckTpPlanHonoured(j->graph, stats, 1, fit.assignments, &param).ok()) return fit;
    for (TpAssignment& a : fit.assignments)
      if (a.param == param) {
        a.style = "replicate";
        a.placement = Placement::Replicate();
      }
    fit.replicated.push_back(param);
  }
  return absl::InternalError("parallel.tp: auto: the proposal did not settle");
}

}  // namespace loom::parallel
