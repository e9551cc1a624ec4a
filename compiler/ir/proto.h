// Converts Graphs to and from loom.v1.GraphDef (proto/loom/v1/graph.proto).
//
//   loom::v1::GraphDef def = GraphToProto(g);
//   LOOM_ASSIGN_OR_RETURN(Graph back, GraphFromProto(def));   // verified
//
// Round trip: PrintGraph(GraphFromProto(GraphToProto(g))) == PrintGraph(g).
#pragma once

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "proto/loom/v1/graph.pb.h"

namespace loom::compiler::ir {

loom::v1::GraphDef GraphToProto(const Graph& g);
// Validates value numbers, dtypes and attrs, then runs the verifier. Errors name
// the node.
absl::StatusOr<Graph> GraphFromProto(const loom::v1::GraphDef& def);

}  // namespace loom::compiler::ir
