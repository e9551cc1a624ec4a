// The CUDA lowering's bridge to the pointwise kernel generator
// (kernels/cuda/codegen/pointwise.h), which takes an IR-free PwBody: a fused
// node's subgraph (or one elementwise node) as a straight-line list of ops
// over the operands.
//
//   LOOM_ASSIGN_OR_RETURN(cg::PwBody body, PointwiseBodyOf(g, node_index));
//   spec.body = &body;
#pragma once

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "kernels/cuda/codegen/pointwise.h"

namespace loom::compiler::cuda {

// The body of a graph whose inputs are the operands in order and whose one
// output is the result (a fused node's subgraph). InvalidArgument naming the
// node for a node without exactly one output or reading a value no input or
// earlier node defines, and for a graph without exactly one output.
absl::StatusOr<loom::kernels::cuda::codegen::PwBody> PointwiseBodyOf(const ir::Graph& body);
// The body of graph node `node`: its subgraph for a fused node, else the one
// op over the node's inputs.
absl::StatusOr<loom::kernels::cuda::codegen::PwBody> PointwiseBodyOf(const ir::Graph& g, int node);

}  // namespace loom::compiler::cuda
