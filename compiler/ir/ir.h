// The Loom graph IR: a static-shape dataflow graph over registry ops.
//
// A Graph holds
//   - values: every tensor the graph names, each with a TensorMeta (dtype and
//     static shape) and an optional placement annotation (filled by dtensor/);
//   - inputs: graph inputs, each a value with a name and a kind (plain input
//     fed per step, trainable parameter, optimizer state, or constant: a
//     buffer such as a mask or a position table, bound once like a parameter
//     but never differentiated or updated);
//   - nodes: op applications, kept in a valid topological order (every input of
//     a node is a graph input or an output of an earlier node);
//   - outputs: values the graph returns; an output may say which input it
//     updates (a parameter or optimizer state after the update step).
//
// Node ops are registry ops (kernels/registry.h), plus the compiler's own
// "fused" op whose node carries a subgraph of elementwise ops (passes/fusion.h).
// A node also has an optional compute dtype chosen by a cast policy (mixed
// precision) — the slot exists, the CPU executor ignores it.
//
// Build graphs with Graph::AddOp, which runs the op's InferFn:
//
//   Graph g("mlp");
//   int x = g.AddInput("x", {DType::kF32, {4, 8}});
//   int w = g.AddInput("w", {DType::kF32, {8, 16}}, InputKind::kParam);
//   LOOM_ASSIGN_OR_RETURN(int y, g.AddOp1("matmul", {x, w}));
//   g.AddOutput(y);
//
// Value ids are indices into values(); removing nodes leaves unreferenced values
// behind (harmless: printers and converters number values afresh).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/registry.h"

namespace loom::compiler::ir {

using kernels::Attrs;
using kernels::TensorMeta;

// The op name of a fusion node; its subgraph holds the fused computation.
inline constexpr absl::string_view kFusedOp = "fused";

enum class InputKind { kInput, kParam, kState, kConst };
absl::string_view InputKindName(InputKind k);  // "input", "param", "state", "const"

struct Value {
  TensorMeta meta;
  std::string placement;  // optional layout annotation (DTensor); empty = none
};

class Graph;

struct Node {
  std::string op;
  std::vector<int> inputs;   // value ids
  Attrs attrs;
  std::vector<int> outputs;  // value ids
  std::optional<DType> compute_dtype;  // cast policy slot; nullopt = the inputs' dtype
  std::shared_ptr<Graph> subgraph;     // set for kFusedOp nodes
  // Where the node comes from in a source model, for error messages: an
  // imported ONNX node ("ONNX node 'NAME' (OpType, opset N)"), kept by the passes
  // that rewrite or differentiate it; empty for nodes Loom wrote itself. Not
  // part of the text form.
  std::string origin;
};

struct GraphInput {
  std::string name;
  int value = -1;
  InputKind kind = InputKind::kInput;
};

struct GraphOutput {
  int value = -1;
  int updates = -1;  // index into inputs() of the input this output replaces; -1 = none
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  // Deep copy (subgraphs of fused nodes are shared: they are immutable once built).
  Graph(const Graph&) = default;
  Graph& operator=(const Graph&) = default;

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // ---- Building -----------------------------------------------------------
  int AddInput(std::string name, TensorMeta meta, InputKind kind = InputKind::kInput);
  // Infers output metas through the registry (or the subgraph for kFusedOp)
  // and appends the node. Errors name the op.
  absl::StatusOr<std::vector<int>> AddOp(absl::string_view op, std::vector<int> inputs,
                                         Attrs attrs = {});
  absl::StatusOr<int> AddOp1(absl::string_view op, std::vector<int> inputs, Attrs attrs = {});
  // Appends a node with caller-provided output metas (the parser; the verifier
  // checks them later). Returns the node index.
  int AddNodeUnchecked(Node node_without_outputs, const std::vector<TensorMeta>& out_metas);
  int NewValue(TensorMeta meta);
  void AddOutput(int value, int updates = -1) { outputs_.push_back({value, updates}); }

  // ---- Access -----------------------------------------------------------------
  const std::vector<Value>& values() const { return values_; }
  Value& value(int id) { return values_[id]; }
  const Value& value(int id) const { return values_[id]; }
  const TensorMeta& meta(int id) const { return values_[id].meta; }
  const std::vector<GraphInput>& inputs() const { return inputs_; }
  std::vector<GraphInput>& mutable_inputs() { return inputs_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  std::vector<GraphOutput>& mutable_outputs() { return outputs_; }
  // Index into inputs() of the input with this name, or -1.
  int FindInput(absl::string_view name) const;

  // ---- Rewriting helpers ------------------------------------------------------
  // Replaces every use of `from` (node inputs, graph outputs) by `to`.
  void ReplaceAllUses(int from, int to);
  // Number of uses of each value id (node inputs plus graph outputs).
  std::vector<int> UseCounts() const;
  // Stable topological sort of nodes (keeps the current order where legal).
  // Fails when the graph has a cycle or an undefined input.
  absl::Status SortTopologically();

 private:
  std::string name_;
  std::vector<Value> values_;
  std::vector<GraphInput> inputs_;
  std::vector<Node> nodes_;
  std::vector<GraphOutput> outputs_;
};

// Output metas of `node` in `g`: the registry's InferFn, or the subgraph's
// outputs for a fused node (after checking the inputs match its inputs).
absl::StatusOr<std::vector<TensorMeta>> InferNode(const Graph& g, const Node& node);
absl::StatusOr<std::vector<TensorMeta>> InferOp(absl::string_view op, const std::vector<TensorMeta>& in,
                                                const Attrs& attrs, const Graph* subgraph);

}  // namespace loom::compiler::ir
