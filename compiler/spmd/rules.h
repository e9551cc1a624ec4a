// Sharding rules: for every registry op, how placements flow through it along
// ONE mesh dimension (PyTorch DTensor's op strategies, decided greedily).
//
// A rule sees the op's global input/output metas, its attrs, the size of the
// mesh dimension and the inputs' current placements along it, and answers
//   - the placement each input must have (propagation inserts the
//     redistribution — a collective or a shard_slice — where it differs),
//   - the placement of each output, and
//   - optionally a constant factor each input is scaled by in the local graph.
// A row-split cross_entropy(_backward) is reweighted by the propagation pass
// itself (a runtime count of non-ignored targets; spmd.cc, SplitLossRows).
// Rules prefer the current placements (no communication) and fall back to
// Replicate. Shards must divide evenly (a rule never asks for an uneven one).
//
// Families (see docs/parallelism.md, "Sharding propagation"):
//   pointwise   shards follow through broadcasting; P+P -> P for add/sub,
//               P*R -> P for ops linear in one input (mul, div's numerator,
//               scale, neg, cast, *_backward's dy), otherwise P -> R;
//   matmul      batch / M shard -> out shard; K shard on both -> P(sum);
//               N shard of b -> out shard on the last dim;
//   reductions  sum over a sharded dim -> P(sum); mean -> P(avg) (equal
//               shards); max -> R there;
//   norms, softmax over a sharded (last / axis) dim -> R; other dims follow;
//   shape ops   reshape / permute / slice / concat / broadcast_to map shard dims;
//   nn          embedding (ids shard; vocab shard -> P(sum) via one-hot),
//               cross_entropy (rows: loss P(avg); vocab: parallel loss), sdpa
//               (batch / head shards), rope, adamw (follows the state), ...
//   unshardable collectives, shard_slice, vocab_onehot, fill: R in, R out.
// grad_norm's rule keeps shards; propagation expands it into per-shard-group
// squared norms + all_reduce (spmd.h).
//
//   const ShardingRule* r = FindShardingRule("matmul");   // null: no rule
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dtensor/spec.h"
#include "kernels/registry.h"

namespace loom::compiler::spmd {

using dtensor::Placement;
using kernels::Attrs;
using kernels::TensorMeta;

struct RuleInput {
  std::string op;
  const Attrs* attrs = nullptr;
  std::vector<TensorMeta> in;    // global metas
  std::vector<TensorMeta> out;   // global metas
  std::vector<Placement> place;  // current placement of each input along this mesh dim
  int64_t world = 1;             // size of the mesh dim
};

struct RuleResult {
  std::vector<Placement> in;   // required placement per input
  std::vector<Placement> out;  // placement per output
  std::vector<double> in_scale;  // empty, or a local scale factor per input (1 = none)
};

using ShardingRule = std::function<absl::StatusOr<RuleResult>(const RuleInput&)>;

// The rule of `op`, or null when it has none (propagation refuses such ops).
const ShardingRule* FindShardingRule(absl::string_view op);
// Ops whose rule only replicates (listed for the docs and tests).
const std::vector<std::string>& UnshardableOps();

// True when dim d of `m` can be split evenly `world` ways.
bool CanShard(const TensorMeta& m, int d, int64_t world);

}  // namespace loom::compiler::spmd
