#include "compiler/models/models.h"
#include "parallel/graph_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "compiler/lowering.h"
#include "dtensor/spec.h"
#include "parallel/styles.h"

namespace loom::parallel {
namespace {

int64_t Bytes(const compiler::ir::TensorMeta& m) {
  int64_t n = static_cast<int64_t>(DTypeSize(m.dtype));
  for (int64_t d : m.shape) n *= d;
  return n;
}

// Memory per rank from the local graph and the arena its program would get.
MemoryEstimate MemoryOf(const compiler::ir::Graph& local, int64_t arena_bytes) {
  MemoryEstimate m;
  for (const auto& in : local.inputs()) {
    const int64_t b = Bytes(local.meta(in.value));
    if (in.kind == compiler::ir::InputKind::kParam || in.kind == compiler::ir::InputKind::kConst) m.parameters += b;
    if (in.kind == compiler::ir::InputKind::kState) m.optimizer += b;
  }
  for (const compiler::ir::Node& n : local.nodes())
    if (n.op == "adamw" && n.inputs.size() > 1) m.gradients += Bytes(local.meta(n.inputs[1]));
  m.activations = std::max<int64_t>(0, arena_bytes - m.gradients);
  return m;
}

// Multiply-adds x 2 of the local graph's matmuls and attention.
double FlopsOf(const compiler::ir::Graph& local) {
  double f = 0;
  for (const compiler::ir::Node& n : local.nodes()) {
    if (n.op == "matmul") {
      const auto& a = local.meta(n.inputs[0]).shape;
      const auto& o = local.meta(n.outputs[0]).shape;
      if (a.size() < 2) continue;
      const int64_t k = n.attrs.GetBool("trans_a") ? a[a.size() - 2] : a.back();
      double out = 1;
      for (int64_t d : o) out *= static_cast<double>(d);
      f += 2.0 * out * static_cast<double>(k);
    } else if (n.op == "sdpa" || n.op == "sdpa_backward") {
      // q [B, H, Tq, D], k [B, H, Tk, D]: Q K^T and P V, forward; twice that backward.
      const int q = n.op == "sdpa" ? 0 : 1;
      const auto& qs = local.meta(n.inputs[q]).shape;
      const auto& ks = local.meta(n.inputs[q + 1]).shape;
      if (qs.size() != 4 || ks.size() != 4) continue;
      const double fwd = 4.0 * qs[0] * qs[1] * qs[2] * ks[2] * qs[3];
      f += n.op == "sdpa" ? fwd : 2 * fwd;
    }
  }
  return f;
}

// The step time: compute, tp collectives on the critical path, dp traffic
// that compute does not hide (graph_planner.h).
void TimeOf(const compiler::ir::Graph& local, const Hardware& hw, const Layout& l, Candidate& c) {
  c.flops = FlopsOf(local);
  c.compute_seconds = c.flops / hw.flops;
  const int npn = hw.nproc_per_node > 0 ? hw.nproc_per_node : hw.world;
  CommEstimate& cm = c.comm;
  cm.tp_inter_node = l.tp > 1 && (l.tp > npn || npn % l.tp != 0);
  cm.dp_inter_node = l.dp > 1 && l.dp * l.tp > npn;
  double dp_before = 0, dp_after = 0, dp_largest = 0;
  bool after_optimizer = false;
  for (const compiler::ir::Node& n : local.nodes()) {
    after_optimizer |= n.op == "adamw";
    const bool ar = n.op == "all_reduce", ag = n.op == "all_gather", rs = n.op == "reduce_scatter";
    if (!ar && !ag && !rs) continue;
    const std::string group = n.attrs.GetString("group");
    const double k = static_cast<double>(n.attrs.GetInt("world", 1));
    if (k <= 1) continue;
    // Ring bytes per rank, over the full (gathered / unscattered) tensor.
    const double full = static_cast<double>(ag ? Bytes(local.meta(n.outputs[0])) : Bytes(local.meta(n.inputs[0])));
    const double bytes = ar ? 2 * (k - 1) / k * full : (k - 1) / k * full;
    if (group == "tp") {
      cm.tp_bytes += static_cast<int64_t>(bytes);
      ++cm.tp_collectives;
    } else {
      cm.dp_bytes += static_cast<int64_t>(bytes);
      ++cm.dp_collectives;
      const double t = bytes / (cm.dp_inter_node ? hw.inter_bandwidth : hw.intra_bandwidth);
      (after_optimizer ? dp_after : dp_before) += t;
      if (!after_optimizer) dp_largest = std::max(dp_largest, t);
    }
  }
  const double tp_link = cm.tp_inter_node ? hw.inter_bandwidth : hw.intra_bandwidth;
  const double tp_lat = cm.tp_inter_node ? hw.inter_latency : hw.intra_latency;
  const double dp_lat = cm.dp_inter_node ? hw.inter_latency : hw.intra_latency;
  cm.tp_seconds = static_cast<double>(cm.tp_bytes) / tp_link + cm.tp_collectives * tp_lat;
  cm.dp_seconds = dp_before + dp_after + cm.dp_collectives * dp_lat;
  cm.dp_exposed_seconds = std::max(dp_before - c.compute_seconds, dp_largest) + dp_after + cm.dp_collectives * dp_lat;
  c.step_seconds = c.compute_seconds + cm.tp_seconds + cm.dp_exposed_seconds;
}

// train.grad_accum_steps > 1: the trainer's accumulators (each parameter's
// tp-local shape in f32, unreduced over dp) plus, on dp > 1, the update
// program's reduced gradients (`reduced`: those AdamW consumes).
absl::StatusOr<int64_t> AccumulatorBytes(const compiler::Compilation& c, const Layout& l, int64_t reduced) {
  const compiler::ir::Graph& joint = c.stages.at("joint");
  const compiler::ir::Graph& local = c.stages.at("parallel");
  const dtensor::MeshShape mesh = MeshOf(l);
  int64_t bytes = 0;
  for (const auto& in : local.inputs()) {
    if (in.kind != compiler::ir::InputKind::kParam) continue;
    LOOM_ASSIGN_OR_RETURN(dtensor::DTensorSpec spec, dtensor::ParseSpec(local.value(in.value).placement, mesh));
    const int64_t n = NumElements(joint.meta(joint.inputs()[joint.FindInput(in.name)].value).shape);
    bytes += 4 * (spec.placements[1].is_shard() ? n / l.tp : n);
  }
  return bytes + (l.dp > 1 ? reduced : 0);
}

// As the planner's table prints sizes: "12.3MiB".
std::string HumanBytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.2fGiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return absl::StrFormat("%.1fMiB", b / (1024.0 * 1024));
  return absl::StrFormat("%.1fKiB", b / 1024.0);
}

}  // namespace

compiler::CompileOptions PlanningCompileOptions(const compiler::ir::Graph& forward, const v1::TrainSpec& train) {
  std::map<std::string, bool> decays;
  for (const auto& in : forward.inputs())
    if (in.kind == compiler::ir::InputKind::kParam) decays[in.name] = forward.meta(in.value).shape.size() >= 2;
  compiler::CompileOptions co;
  co.lower = false;
  co.lowering.in_place_updates = true;
  compiler::AdamWOptions adam;
  adam.beta1 = train.beta1();
  adam.beta2 = train.beta2();
  adam.eps = train.eps();
  adam.weight_decay = train.weight_decay();
  adam.max_norm = train.grad_clip();
  adam.decays = [decays](const std::string& name) {
    auto it = decays.find(name);
    return it != decays.end() && it->second;
  };
  co.adamw = adam;
  if (const std::string& ac = train.activation_checkpointing(); ac == "blocks" || ac == "selective") {
    co.checkpoint_blocks = compiler::models::BlockOfParameter;
    co.checkpoint_selective = ac == "selective";
  }
  return co;
}

absl::StatusOr<Candidate> EstimateCompiled(const GraphModel& m, int64_t batch, const Hardware& hw,
                                           const Layout& layout) {
  const compiler::CompileOptions co = PlanningCompileOptions(m.forward, m.train);
  LOOM_ASSIGN_OR_RETURN(compiler::Compilation c, CompileParallel(m.forward, co, m.model, batch, layout));
  LOOM_ASSIGN_OR_RETURN(compiler::passes::MemoryPlan arena,
                        compiler::PlanLoweredMemory(c.stages.at("planned"), co.lowering));
  Candidate cand;
  cand.layout = layout;
  cand.memory = MemoryOf(c.stages.at("planned"), arena.peak_bytes);
  if (m.train.grad_accum_steps() > 1) {
    LOOM_ASSIGN_OR_RETURN(cand.memory.accumulators, AccumulatorBytes(c, layout, cand.memory.gradients));
  }
  TimeOf(c.stages.at("parallel"), hw, layout, cand);
  if (cand.memory.total() > hw.memory_bytes) {
    cand.feasible = false;
    cand.reason = absl::StrCat("needs ", HumanBytes(static_cast<double>(cand.memory.total())), " per rank > budget ",
                               HumanBytes(hw.memory_bytes));
  }
  return cand;
}

absl::StatusOr<Plan> MakeGraphPlan(const GraphModel& m, int64_t batch, const Hardware& hw,
                                   const std::function<bool(const Layout&)>& only) {
  LOOM_RETURN_IF_ERROR(CheckWorldSize(hw.world, hw.world, 1));
  Plan plan;
  plan.dims.family = m.model.family();
  plan.dims.seq_len = m.model.seq_len();
  plan.dims.vocab = m.model.vocab();
  for (const auto& in : m.forward.inputs())
    if (in.kind == compiler::ir::InputKind::kParam)
      plan.dims.num_parameters += NumElements(m.forward.meta(in.value).shape);
  plan.model_summary = m.summary;
  plan.grad_accum_steps = std::max(1, m.train.grad_accum_steps());
  plan.batch = batch * plan.grad_accum_steps;
  plan.hw = hw;
  for (int tp = 1; tp <= hw.world; ++tp) {
    if (hw.world % tp != 0) continue;
    Layout base{hw.world / tp, tp, 0, false, {}};
    auto skip = [&](const absl::Status& s) { plan.skipped.push_back({base, std::string(s.message())}); };
    if (tp > 1 && m.model.family() == "onnx") {  // built-in families take their Megatron placements
      TpPlanShown shown;
      if (m.tp_plan.empty()) {
        auto fit = FitTpPlan(m.forward, PlanningCompileOptions(m.forward, m.train), m.model, batch, base);
        if (!fit.ok()) {
          skip(fit.status());
          continue;
        }
        shown = {fit->rules, fit->assignments, true, fit->replicated};
      } else {
        auto a = ResolveTpPlan(m.forward, m.tp_plan, tp);
        if (!a.ok()) {
          skip(a.status());
          continue;
        }
        shown = {m.tp_plan, *a, false, {}};
      }
      base.tp_plan = shown.rules;
      plan.tp_plans[tp] = std::move(shown);
    }
    if (absl::Status legal = CheckParallelLayout(m.model, batch, base, hw.world); !legal.ok()) {
      skip(legal);
      plan.tp_plans.erase(tp);
      continue;
    }
    for (int zero = 0; zero <= (base.dp > 1 ? 3 : 0); ++zero) {
      Layout l = base;
      l.zero_stage = zero;
      if (only && !only(l)) continue;
      auto c = EstimateCompiled(m, batch, hw, l);
      if (!c.ok()) {
        plan.skipped.push_back({l, std::string(c.status().message())});
        continue;
      }
      plan.ranked.push_back(std::move(*c));
    }
  }
  LOOM_RETURN_IF_ERROR(RankCandidates(plan));
  return plan;
}

}  // namespace loom::parallel
