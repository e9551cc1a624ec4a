// lower_nodes' launches for the ops a parallel program adds (compiler/spmd,
// compiler/comm/communicator.h), on one rank:
//   all_reduce(x) {group, reduce}       one kCollective launch: out = x, then
//                                       the group's AllReduce on out in place
//   all_gather(x) {axis, group, world}  kCollective into out (axis 0); on
//                                       another axis into a [world, x...]
//                                       temp, then one strided copy into out
//   reduce_scatter(x) {axis, ...}       kCollective from x (axis 0); on
//                                       another axis a strided copy of x
//                                       into a [world, out...] temp first
//   shard_slice(x) {axis, group, world} a strided copy of this rank's block
//                                       (PlanOptions::group_rank)
//   vocab_onehot(t) {num_classes, ...}  kVocabOnehot at this rank's block
// The collective's operand and result share the result's storage dtype (a
// cast in front where the operand's differs). A kCollective launch runs on
// the host between device launches (the executor synchronises its stream
// first), so its attrs keep the graph node's: group, reduce, world.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

// Whether lower_nodes hands `op` to LowerSpmdOp.
bool IsSpmdOp(const std::string& op);

// Appends node i's launches (L: its launch so far: op, node, nodes, attrs).
absl::Status LowerSpmdOp(PlanState& s, int i, Launch L);

}  // namespace loom::compiler::cuda::plan_internal
