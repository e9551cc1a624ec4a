// The IR verifier: checks the invariants every pass and converter relies on.
//
//   - graph input names are unique and non-empty; each input has its own value;
//   - nodes are in topological order: every node input is a graph input or an
//     output of an earlier node; every value is defined exactly once;
//   - every op exists (registry or the fused op with a subgraph, itself verified)
//     and its InferFn accepts the inputs and yields exactly the recorded metas;
//   - graph outputs refer to defined values; an output that updates an input has
//     that input's meta.
//
// Errors are InvalidArgument naming the graph, node index, op and value.
#pragma once

#include "absl/status/status.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::ir {

absl::Status Verify(const Graph& g);

}  // namespace loom::compiler::ir
