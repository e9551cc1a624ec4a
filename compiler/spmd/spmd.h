// Sharding propagation: a global-semantics graph (usually the joint graph:
// forward + backward + AdamW) plus DTensorSpecs for its inputs on a mesh
// becomes the LOCAL graph every rank runs (SPMD).
//
//   SpmdOptions o;
//   o.mesh = {{"dp", "tp"}, {2, 2}};
//   o.inputs["x"] = ParseSpec("S(0),R", o.mesh).value();   // absent: replicated
//   LOOM_ASSIGN_OR_RETURN(Graph local, Parallelize(joint, o));
//
// Steps, in the graph's topological order:
//   1. every node's op must have a sharding rule (rules.h); the first one
//      without is refused before anything else, naming the op and the node;
//   2. per mesh dim, the rule turns the inputs' current placements into
//      required input placements and output placements;
//   3. where an input's placement differs from the required one, a
//      redistribution is inserted (per mesh dim, gathers/reductions first):
//        S(d) -> R     all_gather {axis=d}        P -> R     all_reduce
//        R -> S(d)     shard_slice {axis=d}       P -> S(d)  reduce_scatter
//        S(e) -> S(d)  all_gather + shard_slice   R -> P     scale 1/world
//      (reduce_scatter_grads = false: P -> S(d) is all_reduce + shard_slice);
//      collectives carry {group = the mesh dim's name, world = its size};
//   4. the node is re-added with LOCAL shapes: attrs that encode global sizes
//      (reshape / broadcast_to / sum_to / fill "shape", embedding_backward's
//      num_embeddings, slice_backward's full_len) are rewritten and the op's
//      InferFn must agree with the expected local shapes (checked);
//      grad_norm over sharded gradients becomes per-shard-group squared norms,
//      all_reduced over the mesh dims that shard them, then sqrt;
//      embedding over a vocab-sharded table becomes vocab_onehot(ids) @ W_local
//      (P(sum)); cross_entropy(_backward) over vocab-sharded logits becomes the
//      vocab-parallel loss (max / sum-exp / target-pick all_reduces), so the
//      full logits never exist on a rank;
//   5. outputs that update an input take that input's placement; the other
//      outputs (the loss) are replicated, except those listed in
//      SpmdOptions::unreduced_outputs, which keep the placement propagation
//      gave them (a micro-step's gradients stay Partial over dp).
// Every value of the result carries its spec as the placement annotation
// ("[dp=S(0), tp=R]"), so the IR text shows placements and collectives.
// Shards must be even; a tensor dim sharded by two mesh dims is refused.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "dtensor/spec.h"

namespace loom::compiler::spmd {

struct SpmdOptions {
  dtensor::MeshShape mesh;                             // dim names = communicator groups
  std::map<std::string, dtensor::DTensorSpec> inputs;  // by graph input name; absent = replicated
  bool reduce_scatter_grads = true;                    // P -> S(d) by reduce_scatter
  // false (ZeRO-3 / FSDP): a redistributed graph input (a sharded parameter)
  // is re-gathered at every use instead of shared, so the memory plan frees
  // each gathered copy right after its use (forward and backward gather
  // separately). Each such all_gather carries an attr {use = n} (n unique in
  // the graph) so that CSE does not merge the gathers back into one copy
  // that lives from the first forward use to the last backward use.
  bool reuse_input_redistributions = true;
  // Output indices that keep their propagated placement (no redistribution):
  // gradient accumulation's micro-step leaves its gradients unreduced, and
  // the update program reduces their sum once.
  std::set<int> unreduced_outputs;
};

// One placement change propagation made for a node's operand (or a graph
// output), on one mesh dim; ids are the GLOBAL graph's.
struct Redistribution {
  int value = -1;
  int node = -1;  // the node that needs the new placement; -1: a graph output
  int mesh_dim = 0;
  dtensor::Placement from, to;
};

struct SpmdStats {
  int collectives = 0;    // all_reduce / all_gather / reduce_scatter inserted
  int shard_slices = 0;
  std::vector<Redistribution> redistributions;  // in the order they were made
};

absl::StatusOr<ir::Graph> Parallelize(const ir::Graph& global, const SpmdOptions& options, SpmdStats* stats = nullptr);

// The first node whose op has no sharding rule, as an InvalidArgument naming
// it; OK when every op has one.
absl::Status CheckShardable(const ir::Graph& g);

// Local (per-rank) shape of `global` under `spec` (even shards only).
absl::StatusOr<Shape> EvenLocalShape(const Shape& global, const dtensor::DTensorSpec& spec);

}  // namespace loom::compiler::spmd
