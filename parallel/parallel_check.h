// Legality checks for a parallel layout (dp x tp mesh, ZeRO stage, sequence
// parallel) against a model and a batch: the "impossible layouts fail early"
// rules, shared by job-spec validation (runtime/jobspec), `loom plan` and the
// planner's enumeration (planner.h), so a layout that cannot work is
// refused before any process starts, with the same message everywhere.
//
// Every error is InvalidArgument naming the field and its value, e.g.
//   "parallel.tp: must divide model.n_head = 12 (got 5)"
//   "train.batch_size: must be divisible by parallel.dp = 3 (got 8)"
//
// The rules:
//   dp >= 1, tp >= 1, zero_stage in 0..3;
//   tp divides model.n_head and model.n_kv_head (heads are split over tp),
//   model.vocab (the embedding and output head are vocab-parallel),
//   model.ffn_hidden (when set) and, under sequence parallelism,
//   model.seq_len: built-in families only;
//   sequence_parallel needs tp > 1 (and a built-in family);
//   tp_plan: ONNX models only; each rule a non-empty pattern and a known
//   style; an ONNX model with tp > 1 needs one (or tp: auto). Whether a plan
//   fits the graph (patterns that match, shapes that split, placements that
//   propagation keeps) is checked when it is compiled (tp_plan.h);
//   train.batch_size divisible by dp (each dp rank takes batch / dp rows);
//   with a world size (world > 0): tp divides it and dp * tp equals it.
//
//   LOOM_RETURN_IF_ERROR(CheckParallelLayout(spec.model(), batch, layout));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::parallel {

// One rule of parallel.tp_plan (tp_plan.h gives the semantics).
struct TpRule {
  std::string pattern;  // a glob over parameter names (fnmatch without flags)
  std::string style;    // one of TpStyles()
};
// "colwise", "rowwise", "vocab", "replicate".
const std::vector<std::string>& TpStyles();

struct ParallelLayout {
  int dp = 1;
  int tp = 1;
  int zero_stage = 0;
  bool sequence_parallel = false;
  // Imported models: how tp shards the parameters (empty for the built-in
  // families, whose Megatron plan is fixed in styles.cc).
  std::vector<TpRule> tp_plan;
};

std::vector<TpRule> TpPlanFromSpec(const v1::ParallelSpec& p);

// `world` <= 0: no world size is known (the layout defines it as dp * tp).
// The model's n_kv_head of 0 means n_head.
absl::Status CheckParallelLayout(const v1::ModelSpec& model, int64_t batch_size, const ParallelLayout& layout,
                                 int world = 0);

// Only the world-size rules: tp divides `world` and dp * tp == world.
absl::Status CheckWorldSize(int world, int dp, int tp);

// The parallel section of a job spec (after defaults). With tp: auto only the
// rules that do not depend on tp are checked (dp, zero_stage); the planner
// checks the rest for every layout it considers.
absl::Status ValidateParallelSection(const v1::JobSpec& spec);

}  // namespace loom::parallel
