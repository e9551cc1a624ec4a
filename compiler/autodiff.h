// Reverse-mode automatic differentiation over the Graph IR.
//
// BuildJointGraph copies the forward graph and appends its backward pass: the
// loss gets a seed gradient of ones (the `fill` op), then nodes are visited in
// reverse order and each op's gradient rule (OpDef::grad, kernels/registry.h)
// emits graph nodes through a graph-building GradBuilder. A value used several
// times receives the sum of its gradients (the `add` op). Gradient rules run
// only for nodes on a path from a differentiated input to the loss; a node on
// that path without a rule is an error naming it and its no_grad_reason.
//
//   LOOM_ASSIGN_OR_RETURN(JointGraph j, BuildJointGraph(forward));
//   // j.graph outputs: forward outputs..., then d loss / d param for each param
//   LOOM_RETURN_IF_ERROR(AppendAdamW(j, {.max_norm = 1.0}));  // optimizer.h
//
// The op names used for the seed and the accumulation are options, so tests
// can run on their own ops.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"

namespace loom::compiler {

struct AutodiffOptions {
  int loss_output = 0;            // which forward output is the (scalar) loss
  std::string add_op = "add";     // accumulates gradients of multiply-used values
  std::string fill_op = "fill";   // seeds d loss / d loss (attrs shape, dtype, value)
  // d loss / d loss, the backward's starting value: finite and nonzero. Every
  // gradient is that multiple of the loss's own (a static loss scale).
  double seed = 1.0;
  std::vector<std::string> wrt;   // input names to differentiate; empty = every param
};

struct JointGraph {
  ir::Graph graph;               // forward + backward
  int num_forward_outputs = 0;   // outputs [0, n) are the forward outputs
  std::vector<int> wrt_inputs;   // input indices differentiated, in order
  std::vector<int> grads;        // gradient value of each, in graph; also outputs n, n+1, ...
};

absl::StatusOr<JointGraph> BuildJointGraph(const ir::Graph& forward, const AutodiffOptions& options = {});

}  // namespace loom::compiler
