// `loom plan` and `parallel: {tp: auto}`: the planner (parallel/planner.h)
// driven by a job spec.
//
//   loom plan JOB.yaml [--world N] [--nproc-per-node N] [--memory-gib X]
//                      [--flops-tflops F] [--intra-gbps B] [--inter-gbps B] [--json]
//
// prints the ranked table of layouts for the world size (default: the spec's
// dp x tp; with tp: auto, dp), with the reason for the winner, or with --json
// the same as one JSON object. Bandwidths are in gigabits per second.
// Defaults (DefaultHardware) describe one CPU node: nproc-per-node = world,
// 16 GiB per rank, 0.1 TFLOP/s per rank, 80 Gb/s inside the node (shared
// memory), 10 Gb/s between nodes (Ethernet). Exit codes: 0 a layout fits,
// 1 none fits, 2 bad usage or an impossible layout in the spec (the message
// names the flag or field).
//
// tp: auto: ResolveAutoLayout replaces the spec's parallel section by the
// planner's choice for the world size (dp, tp, zero_stage, sequence_parallel,
// and for an imported model the tp_plan that layout was estimated with;
// an explicit zero_stage > 0 or sequence_parallel: true in the spec is kept as a
// constraint), and WritePlan records the plan in the run folder as plan.txt
// (the table) and plan.json. A spec without tp: auto is left alone.
//
//   auto plan = ResolveAutoLayout(spec, DefaultHardware(spec), world);
//   if (plan.ok() && *plan) WritePlan(**plan, run_dir);
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/planner.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::plan {

// The ranked layouts for the job's model: gpt and llama by the planner's
// coefficient model (planner.h), or, with train.activation_checkpointing:
// blocks, from each layout's compiled per-rank program (which recomputes the
// blocks; no sequence-parallel layouts, workspace not modelled); an imported
// model (model.onnx) from each layout's compiled per-rank program
// (parallel/graph_planner.h), its tp layouts with the job's parallel.tp_plan
// or, without one, the proposal.
absl::StatusOr<parallel::Plan> PlanJob(const v1::JobSpec& spec, const parallel::Hardware& hw,
                                       const std::function<bool(const parallel::Layout&)>& only = nullptr);

// World size the spec implies: dp x tp, or dp with tp: auto.
int SpecWorldSize(const v1::JobSpec& spec);
parallel::Hardware DefaultHardware(const v1::JobSpec& spec);

// Null when the spec has no tp: auto. `world` <= 0: SpecWorldSize(spec).
// Errors (nothing fits, no legal layout) are returned before any process starts.
absl::StatusOr<std::unique_ptr<parallel::Plan>> ResolveAutoLayout(v1::JobSpec& spec, parallel::Hardware hw,
                                                                   int world = 0);
absl::Status WritePlan(const parallel::Plan& plan, const std::string& run_dir);

int RunPlanCommand(const std::vector<std::string>& args);
int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace loom::runtime::plan
