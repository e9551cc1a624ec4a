// The layout planner for an imported graph (model.family onnx), and for gpt
// and llama under train.activation_checkpointing: blocks (which the fitted
// coefficients do not model): every layout's memory and step time come from
// its compiled per-rank program, not from per-family coefficients (planner.h
// keeps those for gpt and llama). Built-in families take their Megatron tp
// placements (styles.h).
//
// Layouts: every dp x tp = world (no sequence parallelism for imported
// graphs), ZeRO 0..3 with dp > 1. For tp > 1 the tensor-parallel plan is the
// job's parallel.tp_plan, or, without one, FitTpPlan's proposal for that tp
// (styles.h); a layout whose plan cannot be honoured, or that is illegal, is
// listed as skipped with the reason.
//
// Per layout, CompileParallel builds the rank's local training step (no
// lowering, no communicators) and PlanLoweredMemory (compiler/lowering.h)
// gives the arena the trainer's program would allocate:
//   parameters   the rank's blocks of the parameters, plus the buffers
//   optimizer    its AdamW m and v blocks
//   gradients    the gradients the AdamW updates consume (local shapes)
//   activations  the arena less those gradients (activations, transients,
//                ZeRO-3's gathered parameters)
//   workspace    not modelled (0): the fused loops' chunk buffers and
//                kernels' transient copies are outside the plan
// and the step time:
//   compute      2 x the multiply-adds of the local graph's matmuls (forward,
//                backward) and attention, at the device rate
//   tp           every tp collective on the critical path: ring bytes
//                (all_reduce 2(k-1)/k, all_gather and reduce_scatter (k-1)/k
//                of the full tensor) over the link, plus its latency
//   dp           collectives before the optimizer overlap compute (all but
//                the largest, or what exceeds the compute time, is hidden);
//                those after it (ZeRO-1/2's all-gather of the updated
//                parameters) are exposed; every latency is exposed.
// Ranking is MakePlan's.
//
//   GraphModel g{forward, spec.model(), spec.train(), TpPlanFromSpec(spec.parallel()), "onnx lm.onnx"};
//   LOOM_ASSIGN_OR_RETURN(Plan p, MakeGraphPlan(g, batch, hw));
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/compile.h"
#include "compiler/ir/ir.h"
#include "parallel/planner.h"
#include "parallel/tp_plan.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::parallel {

struct GraphModel {
  compiler::ir::Graph forward;  // the training forward (x, y -> loss), as the trainer compiles it
  v1::ModelSpec model;          // family onnx
  v1::TrainSpec train;          // the optimizer's settings
  std::vector<TpRule> tp_plan;  // the job's; empty: propose one per tp
  std::string summary;          // the table's model line
};

// The training compile the trainers use for `train` (AdamW settings, weight
// decay on parameters of rank >= 2, activation checkpointing), without
// lowering.
compiler::CompileOptions PlanningCompileOptions(const compiler::ir::Graph& forward, const v1::TrainSpec& train);

// The estimate for one layout (its tp_plan filled in when tp > 1).
absl::StatusOr<Candidate> EstimateCompiled(const GraphModel& m, int64_t batch, const Hardware& hw,
                                           const Layout& layout);

// `batch`: the rows `forward` takes, one micro-batch under
// train.grad_accum_steps = k > 1 (the plan shows batch * k, and each
// estimate counts MemoryEstimate::accumulators).
absl::StatusOr<Plan> MakeGraphPlan(const GraphModel& m, int64_t batch, const Hardware& hw,
                                   const std::function<bool(const Layout&)>& only = nullptr);

}  // namespace loom::parallel
