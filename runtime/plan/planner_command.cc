#include "runtime/plan/planner_command.h"

#include <cmath>
#include <limits>
#include <optional>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/status.h"
#include "compiler/models/models.h"
#include "parallel/graph_planner.h"
#include "parallel/parallel_check.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/onnx_model.h"

namespace loom::runtime::plan {

using parallel::Hardware;
using parallel::Layout;
using parallel::Plan;

namespace {

// "onnx lm.onnx: 28 parameters (27.8K values), 5 buffers; seq_len 8, vocab 64".
std::string Summary(const v1::JobSpec& spec, const train::OnnxTrainingModel& m) {
  int64_t values = 0;
  for (const auto& p : m.params) values += NumElements(p.shape);
  return absl::StrFormat("onnx %s: %d parameters (%.2fM values), %d buffers; seq_len %d, vocab %d",
                         spec.model().onnx(), m.params.size(), values / 1e6, m.initial.size() - m.params.size(),
                         spec.model().seq_len(), spec.model().vocab());
}

}  // namespace

absl::StatusOr<Plan> PlanJob(const v1::JobSpec& spec, const Hardware& hw,
                             const std::function<bool(const Layout&)>& only) {
  if (spec.model().family() != "onnx" && (spec.train().activation_checkpointing() == "blocks" ||
                                           spec.train().activation_checkpointing() == "selective")) {
    // The fitted coefficients do not model recomputation: plan from the compiled programs.
    parallel::GraphModel g;
    // With train.grad_accum_steps the training step runs one micro-batch.
    const int accum = std::max(1, spec.train().grad_accum_steps());
    compiler::models::BuildOptions bo = compiler::models::TrainingOptions(spec);
    bo.batch /= accum;
    LOOM_ASSIGN_OR_RETURN(g.forward, compiler::models::BuildForward(spec.model(), bo));
    LOOM_ASSIGN_OR_RETURN(auto params, compiler::models::Parameters(spec.model()));
    g.summary = absl::StrFormat(
        "%s, %d layers, d_model %d, seq_len %d: %.2fM parameters; activation checkpointing "
        "%s (memory from the compiled plan)",
        spec.model().family(), spec.model().n_layer(), spec.model().d_model(), spec.model().seq_len(),
        compiler::models::NumParameters(params) / 1e6, spec.train().activation_checkpointing());
    g.model = spec.model();
    g.train = spec.train();
    return parallel::MakeGraphPlan(g, spec.train().batch_size() / accum, hw, only);
  }
  if (spec.model().family() != "onnx")
    return parallel::MakePlan(spec.model(), spec.train().batch_size(), hw, only,
                              std::max(1, spec.train().grad_accum_steps()));
  LOOM_ASSIGN_OR_RETURN(train::OnnxTrainingModel m, train::LoadOnnxModel(spec));
  parallel::GraphModel g;
  g.summary = Summary(spec, m);
  g.forward = std::move(m.train_forward);
  g.model = spec.model();
  g.train = spec.train();
  g.tp_plan = parallel::TpPlanFromSpec(spec.parallel());
  return parallel::MakeGraphPlan(g, spec.train().batch_size(), hw, only);
}

int SpecWorldSize(const v1::JobSpec& spec) {
  const auto& p = spec.parallel();
  const int dp = std::max(1, p.dp());
  return p.tp_auto() ? dp : dp * std::max(1, p.tp());
}

Hardware DefaultHardware(const v1::JobSpec& spec) {
  Hardware hw;  // the CPU defaults (parallel/planner.h)
  hw.world = SpecWorldSize(spec);
  hw.activation_bytes = spec.train().precision() == "bf16" ? 2 : 4;
  return hw;
}

absl::StatusOr<std::unique_ptr<Plan>> ResolveAutoLayout(v1::JobSpec& spec, Hardware hw, int world) {
  if (!spec.parallel().tp_auto()) return std::unique_ptr<Plan>();
  hw.world = world > 0 ? world : SpecWorldSize(spec);
  const int want_zero = spec.parallel().zero_stage();
  const bool want_sp = spec.parallel().sequence_parallel();
  auto only = [&](const Layout& l) {
    if (want_zero > 0 && l.dp > 1 && l.zero_stage != want_zero) return false;
    if (want_sp && !l.sequence_parallel) return false;
    return true;
  };
  auto plan = PlanJob(spec, hw, only);
  if (!plan.ok()) return Annotate(plan.status(), "parallel.tp: auto");
  if (plan->winner < 0)
    return absl::ResourceExhaustedError(absl::StrCat("parallel.tp: auto: ", plan->reason));
  const Layout& l = plan->ranked[plan->winner].layout;
  auto* p = spec.mutable_parallel();
  p->set_dp(l.dp);
  p->set_tp(l.tp);
  p->set_zero_stage(l.zero_stage);
  p->set_sequence_parallel(l.sequence_parallel);
  p->set_tp_auto(false);
  if (l.tp > 1 && !l.tp_plan.empty()) {  // an imported model: the plan that layout was estimated with
    p->clear_tp_plan();
    for (const parallel::TpRule& r : l.tp_plan) {
      v1::TpRule* out = p->add_tp_plan();
      out->set_pattern(r.pattern);
      out->set_style(r.style);
    }
  }
  return std::make_unique<Plan>(std::move(*plan));
}

absl::Status WritePlan(const Plan& plan, const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create run folder ", run_dir, ": ", ec.message()));
  for (auto [name, text] : {std::pair<const char*, std::string>{"plan.txt", parallel::FormatPlanTable(plan)},
                            {"plan.json", parallel::PlanToJson(plan)}}) {
    const std::string path = absl::StrCat(run_dir, "/", name);
    std::ofstream f(path);
    f << text;
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

int RunPlanCommand(const std::vector<std::string>& args) { return RunPlanCommand(args, std::cout, std::cerr); }

int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto fail = [&](int code, absl::string_view msg) {
    err << "loom plan: " << msg << "\n";
    return code;
  };
  std::vector<std::string> positional;
  bool json = false;
  int world = 0, npn = 0;
  double memory_gib = 0, tflops = 0, intra = 0, inter = 0;
  const double tiny = std::numeric_limits<double>::min(), huge = std::numeric_limits<double>::max();
  FlagSet fs("loom plan", "JOB.yaml", "Ranks parallel layouts (dp x tp, ZeRO, SP) for a job by the cost model.");
  fs.Int("world", &world, "N", "ranks to plan for (default: the spec's dp x tp)", 1)
      .Int("nproc-per-node", &npn, "N", "ranks per node (faster links inside a node)", 1)
      .Double("memory-gib", &memory_gib, "X", "memory per rank, GiB", tiny, huge)
      .Double("flops-tflops", &tflops, "F", "compute per rank, TFLOP/s", tiny, huge)
      .Double("intra-gbps", &intra, "B", "bandwidth inside a node, GB/s", tiny, huge)
      .Double("inter-gbps", &inter, "B", "bandwidth between nodes, GB/s", tiny, huge)
      .Bool("json", &json, "the table as JSON on stdout")
      .Positionals(&positional, "JOB.yaml", 1, 1);
  if (std::optional<int> rc = fs.Parse(args, out, err)) return *rc;
  const std::string& path = positional[0];
  auto loaded = jobspec::LoadJobSpec(path);
  if (!loaded.ok()) return fail(2, loaded.status().message());
  const v1::JobSpec& spec = *loaded;
  Hardware hw = DefaultHardware(spec);
  if (world > 0) {
    // An explicit layout in the spec must match the world size asked about.
    const auto& p = spec.parallel();
    if (!p.tp_auto() && p.dp() * p.tp() > 1) {
      absl::Status s = parallel::CheckWorldSize(world, p.dp(), p.tp());
      if (!s.ok()) return fail(2, absl::StrCat(path, ": ", s.message(), " (--world ", world, ")"));
    }
    hw.world = world;
  }
  if (npn > 0) hw.nproc_per_node = npn;
  if (memory_gib > 0) hw.memory_bytes = memory_gib * (1ull << 30);
  if (tflops > 0) hw.flops = tflops * 1e12;
  if (intra > 0) hw.intra_bandwidth = intra * 1e9 / 8;
  if (inter > 0) hw.inter_bandwidth = inter * 1e9 / 8;
  auto plan = PlanJob(spec, hw);
  if (!plan.ok()) return fail(2, plan.status().message());
  // An imported model's own tp plan that the graph refuses is the job's error.
  const auto& par = spec.parallel();
  if (spec.model().family() == "onnx" && !par.tp_auto() && par.tp() > 1)
    for (const parallel::Skipped& k : plan->skipped)
      if (k.layout.tp == par.tp() && absl::StartsWith(k.reason, "parallel.tp_plan"))
        return fail(2, absl::StrCat(path, ": ", k.reason));
  out << (json ? parallel::PlanToJson(*plan) : parallel::FormatPlanTable(*plan));
  return plan->winner >= 0 ? 0 : 1;
}

}  // namespace loom::runtime::plan
