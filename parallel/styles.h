// Parallel styles: a layout {dp, tp, zero_stage, sequence_parallel} turned
// into DTensorSpecs for the inputs of a model family's joint graph (params,
// AdamW state, batch) on the mesh (dp, tp), and the compile driver that runs
// sharding propagation (compiler/spmd) between the "joint" stage and the
// optimization passes.
//
//   DP       params and state R; x, y S(0) on dp (the gradient all-reduce over
//            dp appears where adamw needs the param's placement).
//   TP       Megatron: QKV / MLP up (gate) weights and biases S(1)/S(0) on tp
//            (colwise; weights are [in, out]), attention-out / MLP down weights
//            S(0) (rowwise), the token embedding vocab-parallel S(0), llama's
//            output head S(1) (vocab-parallel logits); state follows the param.
//   ZeRO-1   AdamW state also S(d) on dp (d: the first dim tp does not split
//            that dp divides); grads reach it by all_reduce + shard_slice.
//   ZeRO-2   the same, grads by reduce_scatter, each scheduled right after
//            its gradient's producer (compiler/spmd/schedule.h) so the full
//            gradient is transient in the arena.
//   SP       (sequence parallel, tp > 1) x and y also S(1) on tp: the
//            residual stream and norms run sequence-sharded; activations are
//            all_gathered before colwise matmuls and rowwise partial sums
//            reduce_scattered back (the rules decide it).
//   ZeRO-3   params S(d) on dp too: every use all_gathers them (the rules do
//            it; each gather is marked so CSE keeps them apart), the memory
//            plan frees each gathered copy after its use.
//
//   Imported (ONNX) models: no built-in plan; dp and ZeRO need none (every
//   parameter replicated or ZeRO-sharded, the batch split over dp), tp takes
//   layout.tp_plan (tp_plan.h), or FitTpPlan's proposal for tp: auto.
//
//   LOOM_ASSIGN_OR_RETURN(auto c, CompileParallel(forward, co, spec.model(), layout));
//   c.Dump("parallel")   // the local graph with placements and collectives
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/compile.h"
#include "compiler/spmd/spmd.h"
#include "dtensor/spec.h"
#include "proto/loom/v1/job.pb.h"
#include "parallel/parallel_check.h"
#include "parallel/tp_plan.h"

namespace loom::parallel {

using Layout = ParallelLayout;

Layout LayoutFromSpec(const v1::ParallelSpec& p);
dtensor::MeshShape MeshOf(const Layout& l);  // (dp, tp)

// The tp placement of every parameter of `forward`: for gpt and llama the
// Megatron plan by name (style "megatron"); for an imported model
// (family onnx) layout.tp_plan resolved against the graph (tp_plan.h).
absl::StatusOr<std::vector<TpAssignment>> TensorParallelPlan(const v1::ModelSpec& model,
                                                             const compiler::ir::Graph& forward, const Layout& layout);

// Specs for the joint graph's inputs by name (params, "<p>.m", "<p>.v", x, y;
// anything else, e.g. an imported model's buffers, replicated).
absl::StatusOr<std::map<std::string, dtensor::DTensorSpec>> AnnotateInputs(const std::vector<TpAssignment>& tp,
                                                                           const compiler::ir::Graph& joint,
                                                                           const Layout& layout);

// DDP-style bucket size for the dp gradient all-reduces when bucketing is on
// (compiler/spmd/bucketing.h). Off by default: without buffer aliasing the
// bucket's concat / reduced / sliced copies add about twice the bucketed
// gradient bytes to the arena, and the executor runs collectives in order,
// so there is no overlap to win yet.
inline constexpr int64_t kGradientBucketBytes = 25 << 20;

compiler::spmd::SpmdOptions SpmdOptionsFor(const Layout& layout, std::map<std::string, dtensor::DTensorSpec> inputs);

// Compile() with the stage "parallel" (the localized joint graph, dumped with
// placements, its reduce_scatters scheduled early) after "joint". A training
// compile sets co.differentiate and co.adamw; an evaluation compile sets
// neither and localizes the forward graph itself ("joint" == "initial"; its
// outputs, the loss and any logits, come out replicated on every rank). A
// micro-step of gradient accumulation sets co.differentiate only: its outputs
// are the loss (replicated) and one gradient per parameter, each left in the
// placement propagation gives it (Partial over dp: no gradient reduction).
// bucket_bytes > 0 merges the dp gradient all-reduces into buckets. The
// layout is checked first (CheckParallelLayout, parallel_check.h), so impossible
// layouts fail before anything is built; an imported model's tp_plan is
// resolved (ResolveTpPlan) and, after propagation of a training compile, held
// to its placements (CheckTpPlanHonoured): a plan that cannot be honoured is
// InvalidArgument naming parallel.tp_plan and the parameter.
// parallel.bucket_mb in bytes (0: no buckets).
inline int64_t DpBucketBytes(const v1::JobSpec& spec) { return int64_t{spec.parallel().bucket_mb()} << 20; }

absl::StatusOr<compiler::Compilation> CompileParallel(const compiler::ir::Graph& forward,
                                                      const compiler::CompileOptions& co, const v1::ModelSpec& model,
                                                      int64_t batch, const Layout& layout, int64_t bucket_bytes = 0);

// The update program of gradient accumulation under `layout`: `update` (the
// parameters, one "<param>.grad" input each and AppendAdamW's nodes, built by
// the trainer) localized with the layout's specs for the parameters and their
// moments (tp: each parameter's tp placement) and `gradient_specs` for the
// gradient inputs (the micro-step's unreduced gradient placements), so the
// gradients are reduced once per update, where AdamW (or ZeRO's sharded
// state) needs them. co must set neither differentiate nor adamw.
absl::StatusOr<compiler::Compilation> CompileParallelUpdate(
    const compiler::ir::Graph& update, const compiler::CompileOptions& co, const std::vector<TpAssignment>& tp,
    const Layout& layout, const std::map<std::string, dtensor::DTensorSpec>& gradient_specs);

// tp: auto for an imported model with layout.tp > 1: ProposeTpAssignments
// (tp_plan.h), then sharding propagation over the joint graph built with `co`;
// each parameter that propagation cannot keep sharded is replicated and the
// rest propagated again, until the plan holds. Returns the plan as rules
// (RulesFor) with the assignments they give.
struct FittedTpPlan {
  std::vector<TpRule> rules;
  std::vector<TpAssignment> assignments;
  std::vector<std::string> replicated;  // parameters the proposal sharded and propagation could not keep
};
absl::StatusOr<FittedTpPlan> FitTpPlan(const compiler::ir::Graph& forward, const compiler::CompileOptions& co,
                                       const v1::ModelSpec& model, int64_t batch, const Layout& layout);

}  // namespace loom::parallel
