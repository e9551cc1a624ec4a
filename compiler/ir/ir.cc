#include "compiler/ir/ir.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::ir {

absl::string_view InputKindName(InputKind k) {
  switch (k) {
    case InputKind::kInput: return "input";
    case InputKind::kParam: return "param";
    case InputKind::kState: return "state";
    case InputKind::kConst: return "const";
  }
  return "input";
}

int Graph::NewValue(TensorMeta meta) {
  values_.push_back(Value{std::move(meta), ""});
  return static_cast<int>(values_.size()) - 1;
}

int Graph::AddInput(std::string name, TensorMeta meta, InputKind kind) {
  int v = NewValue(std::move(meta));
  inputs_.push_back({std::move(name), v, kind});
  return v;
}

int Graph::FindInput(absl::string_view name) const {
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i].name == name) return static_cast<int>(i);
  return -1;
}

absl::StatusOr<std::vector<TensorMeta>> InferOp(absl::string_view op, const std::vector<TensorMeta>& in,
                                                const Attrs& attrs, const Graph* subgraph) {
  if (op == kFusedOp) {
    if (subgraph == nullptr) return absl::InvalidArgumentError("fused: node has no subgraph");
    if (subgraph->inputs().size() != in.size())
      return absl::InvalidArgumentError(absl::StrCat("fused: expected ", subgraph->inputs().size(),
                                                     " inputs, got ", in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      if (!(subgraph->meta(subgraph->inputs()[i].value) == in[i]))
        return absl::InvalidArgumentError(absl::StrCat("fused: input ", i, " is ", in[i].ToString(),
                                                       ", the subgraph takes ",
                                                       subgraph->meta(subgraph->inputs()[i].value).ToString()));
    }
    std::vector<TensorMeta> out;
    for (const GraphOutput& o : subgraph->outputs()) out.push_back(subgraph->meta(o.value));
    return out;
  }
  LOOM_ASSIGN_OR_RETURN(const kernels::OpDef* def, kernels::OpRegistry::Global().Get(op));
  if (def->num_inputs >= 0 && static_cast<int>(in.size()) != def->num_inputs)
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": expected ", def->num_inputs, " inputs, got ", in.size()));
  auto metas = def->infer(in, attrs);
  if (!metas.ok()) return Annotate(metas.status(), op);
  if (def->num_outputs >= 0 && static_cast<int>(metas->size()) != def->num_outputs)
    return absl::InternalError(absl::StrCat(op, ": InferFn returned ", metas->size(), " outputs, the op declares ",
                                            def->num_outputs));
  return metas;
}

absl::StatusOr<std::vector<TensorMeta>> InferNode(const Graph& g, const Node& node) {
  std::vector<TensorMeta> in;
  in.reserve(node.inputs.size());
  for (int v : node.inputs) {
    if (v < 0 || v >= static_cast<int>(g.values().size()))
      return absl::InvalidArgumentError(absl::StrCat(node.op, ": input value ", v, " does not exist"));
    in.push_back(g.meta(v));
  }
  return InferOp(node.op, in, node.attrs, node.subgraph.get());
}

absl::StatusOr<std::vector<int>> Graph::AddOp(absl::string_view op, std::vector<int> inputs, Attrs attrs) {
  Node n;
  n.op = std::string(op);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorMeta> metas, InferNode(*this, n));
  int idx = AddNodeUnchecked(std::move(n), metas);
  return nodes_[idx].outputs;
}

absl::StatusOr<int> Graph::AddOp1(absl::string_view op, std::vector<int> inputs, Attrs attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int> outs, AddOp(op, std::move(inputs), std::move(attrs)));
  if (outs.empty()) return absl::InvalidArgumentError(absl::StrCat(op, ": op has no outputs"));
  return outs[0];
}

int Graph::AddNodeUnchecked(Node node, const std::vector<TensorMeta>& out_metas) {
  node.outputs.clear();
  for (const TensorMeta& m : out_metas) node.outputs.push_back(NewValue(m));
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size()) - 1;
}

void Graph::ReplaceAllUses(int from, int to) {
  for (Node& n : nodes_)
    for (int& v : n.inputs)
      if (v == from) v = to;
  for (GraphOutput& o : outputs_)
    if (o.value == from) o.value = to;
}

std::vector<int> Graph::UseCounts() const {
  std::vector<int> uses(values_.size(), 0);
  for (const Node& n : nodes_)
    for (int v : n.inputs) ++uses[v];
  for (const GraphOutput& o : outputs_) ++uses[o.value];
  return uses;
}

absl::Status Graph::SortTopologically() {
  const int n = static_cast<int>(nodes_.size());
  std::vector<int> producer(values_.size(), -1);
  for (int i = 0; i < n; ++i)
    for (int v : nodes_[i].outputs) producer[v] = i;
  std::vector<bool> is_input(values_.size(), false);
  for (const GraphInput& in : inputs_) is_input[in.value] = true;
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i) {
    for (int v : nodes_[i].inputs) {
      if (v < 0 || v >= static_cast<int>(values_.size()) || (producer[v] < 0 && !is_input[v]))
        return absl::InvalidArgumentError(absl::StrCat("node ", i, " (", nodes_[i].op, ") uses undefined value ", v));
      if (producer[v] >= 0) {
        ++pending[i];
        users[producer[v]].push_back(i);
      }
    }
  }
  // Min-heap on the current index: stable.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (static_cast<int>(order.size()) != n) return absl::InvalidArgumentError("graph has a cycle");
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int i : order) sorted.push_back(std::move(nodes_[i]));
  nodes_ = std::move(sorted);
  return absl::OkStatus();
}

}  // namespace loom::compiler::ir
