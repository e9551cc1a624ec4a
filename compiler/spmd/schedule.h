// Collective scheduling after sharding propagation: every reduce_scatter (and,
// with options.all_reduce, every all_reduce) moves to right after the
// producer of its input (as soon as possible); a shard_slice of a moved
// all_reduce follows it.
//
// Parallelize emits a redistribution where its consumer needs it; for the dp
// gradient reductions that consumer is AdamW at the very end, so without this
// pass every full (unreduced) gradient stays live in the arena from the end
// of its backward computation to the optimizer. Moved right after its
// producer, a ZeRO-2 reduce_scatter frees the full gradient at once and only
// the 1/dp shard waits for the optimizer. An all_reduce frees nothing by
// moving (its output is as large as its input) and only starts earlier, which
// an executor that overlaps communication could use; the executor runs
// in order, and on the gpt test model moving them grows the DP / ZeRO-1 arenas
// by 10-16% (the greedy placement fragments more), so it is off by default.
//
// Only the order changes: each moved node keeps its inputs, attrs and outputs,
// and lands after all of its inputs' producers, so the order stays
// topological. Collectives whose inputs are all graph inputs stay where they
// are (moving them would only lengthen their outputs' lifetimes). Every rank
// runs the same graph, so the collectives' order is still the same on all
// ranks. Deterministic: depends on the graph only.
//
//   LOOM_ASSIGN_OR_RETURN(bool moved, spmd::ScheduleCollectivesEarly(local));   // reduce_scatters
#pragma once

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::spmd {

struct ScheduleOptions {
  bool all_reduce = false;  // also move all_reduce (and its shard_slice)
};

// Returns whether any node moved.
absl::StatusOr<bool> ScheduleCollectivesEarly(ir::Graph& g, const ScheduleOptions& options = {});

}  // namespace loom::compiler::spmd
