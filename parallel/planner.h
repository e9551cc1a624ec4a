// The 2D layout planner: a cost model over (dp x tp) meshes, ZeRO stages and
// sequence parallelism, and the ranking behind `loom plan` and `tp: auto`.
//
// Inputs: the model (a loom.v1.ModelSpec after jobspec defaults), the global
// batch, and the hardware (world size, processes per node, per-device memory
// budget, device FLOP rate, intra- and inter-node link bandwidths).
//
// Enumeration: every dp x tp = world factorisation that passes the legality
// rules (parallel_check.h: tp divides n_head and n_kv_head,
// batch divisible by dp), ZeRO stage 0..3 (1..3 only with dp > 1: with dp = 1
// they equal stage 0), sequence parallel off/on (on only with tp > 1). Ranks
// are laid out row-major with tp last (dtensor/spec.h), so tp groups are
// adjacent ranks: inside one node when tp divides nproc_per_node, dp across
// nodes once dp * tp > nproc_per_node.
//
// Memory per rank (bytes; f32 master weights like the Trainer). The model
// mirrors what Loom allocates today (the lowered local programs' arenas and
// the Trainer's tensors), not textbook ZeRO; planner.cc gives the formulas:
//   parameters   local parameter bytes: TP shards the matrices, the
//                vocab-parallel embedding/output and the column-parallel
//                biases; norms, positions and row-parallel biases are
//                replicated. ZeRO-3: the 1/dp shard plus the largest local
//                parameter (each use gathers a parameter and frees it after);
//   gradients    the local gradients in the step's arena: full for ZeRO 0/1
//                (reduced where the optimizer consumes them), the 1/dp shards
//                for ZeRO 2/3 (each reduce_scattered right after its
//                producer);
//   optimizer    AdamW m and v (f32), divided by dp from ZeRO-1 on;
//   activations  the rest of the training step's arena: the larger of the
//                activation phase (saved activations, logits, transients:
//                per-token coefficients of C, F and V per layer, sharded by
//                tp as in Megatron, less under sequence parallelism, less an
//                overlap with the gradients) and the end of the step (the
//                full gradients for ZeRO-0, the all-gathered updated
//                parameters for ZeRO-1/2, the gradient shards for ZeRO-3);
//   workspace    what the Trainer allocates beyond the training step's state
//                and arena: its evaluation program's arena, the fused loops'
//                chunk buffers (one thread's), the kernels' transient copies.
//                The layout checks compare a rank's training program (state
//                + arena) with total() - workspace.
// The coefficients (MemoryCoefficients) are fitted by tests/parallel:planner_calibrate
// on a calibration set; planner_memory_test (single-process peaks, within
// 10%) and planner_layout_memory_test (state + arena of world-4 layouts,
// within 12%) check held-out models, batches and layouts.
//
// Step time: compute = (6 * N * tokens + 6 * n_layer * T * C * tokens
// attention FLOPs, causal) / (dp * tp) at the device rate. Tensor-parallel
// collectives (per layer 2 all-reduces forward and 2 backward of a [b, T, C]
// activation, or the same bytes as all-gather + reduce-scatter under sequence
// parallelism, plus the embedding's and output projection's all-reduces and
// the parallel cross-entropy's three [b*T] reductions) are on the critical
// path. Data-parallel traffic overlaps compute, down to one bucket or block:
// ZeRO-0 all-reduces gradient buckets during backward; ZeRO-1/2 reduce
// (-scatter) them during backward and all-gather the updated parameters after
// the optimizer step (not overlapped); ZeRO-3 gathers each block before its
// forward use (behind forward compute), again for backward, and
// reduce-scatters its gradients (behind backward compute). Ring collectives
// move 2(n-1)/n (all-reduce) or (n-1)/n (gather, scatter) of the bytes per
// rank, on the link the group spans; each collective also costs a fixed
// latency, always exposed.
//
// Ranking: layouts that fit in the memory budget first, by estimated step
// time, then lower peak memory, then the simpler layout. The winner is the
// first feasible one; when none fits, MakePlan still ranks them (winner -1).
//
//   LOOM_ASSIGN_OR_RETURN(Plan p, MakePlan(spec.model(), batch, hw));
//   std::cout << FormatPlanTable(p);
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"
#include "parallel/parallel_check.h"
#include "parallel/tp_plan.h"

namespace loom::parallel {

using Layout = ParallelLayout;
std::string LayoutName(const Layout& l);  // "dp=2 tp=2 zero=1 sp"

// Defaults describe one CPU node running Gloo (what `loom plan` assumes when
// no flag says otherwise).
struct Hardware {
  int world = 1;
  int nproc_per_node = 0;             // 0: world (one node)
  double memory_bytes = 16.0 * (1ull << 30);
  double flops = 0.1e12;              // per device, FLOP/s (sustained)
  double intra_bandwidth = 80e9 / 8;  // bytes/s per rank inside a node (80 Gb/s)
  double inter_bandwidth = 10e9 / 8;  // bytes/s per rank between nodes (10 Gb/s)
  double intra_latency = 50e-6;       // seconds per collective (a rendezvous)
  double inter_latency = 100e-6;
  int64_t bucket_bytes = 4ll << 20;   // dp gradient bucket size
  int activation_bytes = 4;           // 4 (f32) or 2 (bf16 mixed precision)
};

struct MemoryEstimate {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  int64_t workspace = 0;
  // train.grad_accum_steps > 1: the trainer's f32 accumulators (one per
  // parameter, its tp-local shape, unreduced over dp so never divided by it)
  // plus, on dp > 1, the update program's reduced copy of the mean gradients
  // (the 1/dp shards under ZeRO-2/3). 0 without accumulation.
  int64_t accumulators = 0;
  int64_t state() const { return parameters + gradients + optimizer; }
  int64_t total() const { return state() + accumulators + activations + workspace; }
};

struct CommEstimate {
  int64_t dp_bytes = 0;   // per rank per step, on the dp group's link
  int64_t tp_bytes = 0;   // per rank per step, on the tp group's link
  int dp_collectives = 0;
  int tp_collectives = 0;
  bool dp_inter_node = false;
  bool tp_inter_node = false;
  double dp_seconds = 0;  // total time of the dp traffic
  double dp_exposed_seconds = 0;  // the part not hidden behind compute
  double tp_seconds = 0;  // on the critical path
};

struct Candidate {
  Layout layout;
  MemoryEstimate memory;
  CommEstimate comm;
  double flops = 0;          // per rank per step
  double compute_seconds = 0;
  double step_seconds = 0;   // compute + tp + exposed dp
  bool feasible = true;
  std::string reason;        // why infeasible ("" when it fits)
};

// The model dimensions the cost model needs (zero fields take the jobspec
// defaults: n_kv_head = n_head, ffn = 4C (gpt) or the llama rounding).
struct ModelDims {
  std::string family;
  int64_t n_layer = 0, n_head = 0, n_kv_head = 0, d_model = 0, vocab = 0, seq_len = 0, ffn = 0;
  int64_t num_parameters = 0;
};
absl::StatusOr<ModelDims> DimsOf(const v1::ModelSpec& model);

// The memory model's fitted part (planner.cc gives the formulas). The
// training step's arena is the larger of two phases: the activation phase,
// the dot product of kActivationTerms byte-valued terms with a family's
// coefficients (in f32 units per token of the local batch unless noted), and
// the end of the step, `end` times the bytes the optimizer phase holds. The
// workspace (what a Trainer allocates beyond the training
// step's state and arena) is likewise a dot product of kWorkspaceTerms terms.
// tests/parallel:planner_calibrate fits the coefficients on its calibration set;
// FittedMemoryCoefficients returns the values planner.cc holds.
inline constexpr int kActivationTerms = 9;
inline constexpr int kWorkspaceTerms = 5;
struct MemoryTerms {
  std::array<double, kActivationTerms> activation{};
  double end = 0;
  std::array<double, kWorkspaceTerms> workspace{};
};
struct MemoryCoefficients {
  std::array<double, kActivationTerms> activation{};
  double end = 1;
  std::array<double, kWorkspaceTerms> workspace{};
};
const std::array<const char*, kActivationTerms>& ActivationTermNames();  // "rep_c", ...
const std::array<const char*, kWorkspaceTerms>& WorkspaceTermNames();    // "eval", ...
const MemoryCoefficients& FittedMemoryCoefficients(const std::string& family);
absl::StatusOr<MemoryTerms> MemoryTermsOf(const v1::ModelSpec& model, int64_t batch, const Hardware& hw,
                                          const Layout& layout);

// The estimate for one layout (which must be legal; see EnumerateLayouts),
// with the fitted coefficients unless `coefficients` is given.
// grad_accum_steps = k > 1 (train.grad_accum_steps): the training step's
// activations are those of one micro-batch (batch / k rows), its gradients
// the full local ones for every ZeRO stage (a micro-step reduces none), the
// workspace still that of the whole batch (the evaluation program), and
// MemoryEstimate::accumulators is counted.
absl::StatusOr<Candidate> Estimate(const v1::ModelSpec& model, int64_t batch, const Hardware& hw,
                                   const Layout& layout, const MemoryCoefficients* coefficients = nullptr,
                                   int grad_accum_steps = 1);

// One rank's memory by Estimate for a job spec: a CPU job of a built-in
// family with a fixed layout (parallel.dp, tp, zero_stage,
// sequence_parallel), its batch, precision and train.grad_accum_steps (the
// accumulators counted); 0 (unknown) for device: cuda,
// an ONNX model or tp: auto. The coordinator fits jobs to agents with it and
// `loom train` to its machine.
int64_t BytesPerRank(const v1::JobSpec& spec);

struct Skipped {
  Layout layout;
  std::string reason;
};

struct Enumeration {
  std::vector<Layout> layouts;   // legal ones
  std::vector<Skipped> skipped;  // dp x tp factorisations that are not (one per tp)
};
absl::StatusOr<Enumeration> EnumerateLayouts(const v1::ModelSpec& model, int64_t batch, const Hardware& hw);

// An imported model's tensor-parallel plan for one tp size (graph_planner.h).
struct TpPlanShown {
  std::vector<TpRule> rules;               // what the layouts of that tp use
  std::vector<TpAssignment> assignments;   // per parameter
  bool proposed = false;                   // tp: auto's proposal (else the job's plan)
  std::vector<std::string> replicated;     // proposed sharded, replicated by propagation
};

struct Plan {
  ModelDims dims;
  int grad_accum_steps = 1;   // train.grad_accum_steps the estimates assume
  std::string model_summary;  // set: the model line printed instead of dims (imported graphs)
  int64_t batch = 0;
  Hardware hw;
  std::vector<Candidate> ranked;
  std::vector<Skipped> skipped;
  int winner = -1;  // index into ranked, -1 when nothing fits
  std::string reason;
  std::map<int, TpPlanShown> tp_plans;  // by tp; imported graphs only
  const Candidate* best() const { return winner < 0 ? nullptr : &ranked[winner]; }
};

// Sorts plan.ranked (fitting layouts first, by step time, then memory, then
// the simpler layout) and sets winner and reason; InvalidArgument when
// nothing is ranked (the skipped reasons named).
absl::Status RankCandidates(Plan& plan);

// `only` (optional): keep only the layouts it accepts (e.g. a fixed zero stage).
// grad_accum_steps: see Estimate.
absl::StatusOr<Plan> MakePlan(const v1::ModelSpec& model, int64_t batch, const Hardware& hw,
                              const std::function<bool(const Layout&)>& only = nullptr, int grad_accum_steps = 1);

// The ranked table (one row per candidate) and the winner's reason.
std::string FormatPlanTable(const Plan& plan);
// The same as one JSON object: {"inputs": {...}, "candidates": [...], "winner": i, "reason": "..."}.
std::string PlanToJson(const Plan& plan);

}  // namespace loom::parallel
