// The plan of a redistribution: which step runs on which mesh dimension, in
// what order. Pure (no communication); Redistribute (redistribute.h) executes
// it. Exposed so tests and docs can check "fewest collectives per pair".
//
// One step changes the placement of one mesh dimension m:
//   all_gather      S(d) -> R       over m's group (blocks padded to the chunk size)
//   all_reduce      P -> R          over m's group (sum; P(avg) then divides by k)
//   reduce_scatter  P -> S(e)       over m's group (padded; P(avg) divides by k)
//   all_to_all      S(d) -> S(e)    over m's group (padded on d and e)
//   slice           R -> S(e)       local: keep this coordinate's chunk
//   pad_to_partial  S(d) -> P       local: the block inside zeros of the parent
//                                   extent (times k for P(avg))
//   scale           P(sum) <-> P(avg)  local: times k / divided by k
//   zero_unless_first R -> P(sum)   local: coordinate 0 keeps, others hold 0
//   (R -> P(avg) needs no step: every term equals the value.)
//
// Order (correct for nested shards, where several mesh dims split one tensor
// dim and the earlier mesh dim is the outer split, see LocalBlock):
//   For each tensor dim, the mesh dims sharding it in `from` and in `to`
//   (ascending) share a common prefix; those stay. Every other shard is
//   1. undone from the LAST mesh dim to the first (so each is the innermost
//      split of its tensor dim when undone): all_gather, pad_to_partial when
//      the target is P, or all_to_all when the target S(e) can be put in
//      place directly (it becomes the innermost split of e and the mesh dims
//      then splitting e are exactly those of `to` up to m);
//   2. then the remaining target shards are made from the FIRST mesh dim to
//      the last (each becomes the innermost split): slice from R,
//      reduce_scatter from P.
//   P -> R all_reduces run where the local block is smallest: before step 1
//   when step 1 grows the block more than step 2 shrinks it, else after
//   step 2. Partial relabels (scale, zero_unless_first) run last.
// Every step checks its nesting precondition while planning; a violation is
// an Internal error (a bug), never a wrong result.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dtensor/spec.h"

namespace loom::dtensor {

enum class StepKind {
  kAllGather,
  kAllReduce,
  kReduceScatter,
  kAllToAll,
  kSlice,
  kPadToPartial,
  kScale,
  kZeroUnlessFirst,
};

struct RedistributeStep {
  StepKind kind;
  int mesh_dim = 0;
  Placement from;
  Placement to;

  bool is_collective() const;
  std::string ToString() const;  // "all_gather(0: S(1)->R)"
};

// The steps from `from` to `to` for a tensor of `tensor_ndim` dims. Both
// specs must be valid for that rank and over the same mesh (InvalidArgument
// naming from_spec / to_spec otherwise).
absl::StatusOr<std::vector<RedistributeStep>> PlanRedistribute(const DTensorSpec& from,
                                                               const DTensorSpec& to, int tensor_ndim);

std::string PlanToString(const std::vector<RedistributeStep>& plan);  // "a; b; c" or "(none)"

}  // namespace loom::dtensor
