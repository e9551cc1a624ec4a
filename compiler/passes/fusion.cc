#include "compiler/passes/fusion.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::passes {
namespace {

bool Fusible(const ir::Node& n) {
  if (n.op == ir::kFusedOp || n.outputs.size() != 1) return false;
  const kernels::OpDef* def = kernels::OpRegistry::Global().Find(n.op);
  return def != nullptr && def->elementwise && def->num_outputs == 1;
}

// Recomputes a unary elementwise op in each of its consumers instead of
// keeping its output, when that lets every consumer's group take it in:
// P = op(X) with X kept anyway (a graph input, or read by more than P), P
// read only by fusible ops of P's dtype and shape (so each copy joins its
// consumer's group), and not a graph output. Each consumer gets its own copy
// of P, placed just before it; the original goes. SwiGLU is the case: silu(g)
// feeds the forward's multiply and, saved, the backward's; with a copy each,
// the forward is one launch and silu(g) is never stored (g is, for the
// backward). Returns whether anything changed.
bool RematerializeUnary(ir::Graph& g) {
  auto& nodes = g.mutable_nodes();
  const std::vector<int> uses = g.UseCounts();
  std::vector<std::vector<int>> readers(g.values().size());
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].inputs)
      if (readers[v].empty() || readers[v].back() != static_cast<int>(i)) readers[v].push_back(static_cast<int>(i));
  std::vector<bool> is_input(g.values().size(), false), remat(g.values().size(), false);
  for (const ir::GraphInput& in : g.inputs()) is_input[in.value] = true;
  std::vector<int> producer(g.values().size(), -1);
  bool any = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& p = nodes[i];
    for (int v : p.outputs) producer[v] = static_cast<int>(i);
    if (!Fusible(p) || p.inputs.size() != 1) continue;
    const int x = p.inputs[0], v = p.outputs[0];
    int node_uses = 0;  // uses by nodes (UseCounts also counts graph outputs)
    for (int c : readers[v]) node_uses += static_cast<int>(std::count(nodes[c].inputs.begin(), nodes[c].inputs.end(), v));
    if (readers[v].size() < 2 || uses[v] != node_uses) continue;  // read once (fusion takes it), or a graph output
    if (!is_input[x] && uses[x] < 2) continue;  // X would be kept only for the copies
    bool all_join = true;
    for (int c : readers[v]) all_join = all_join && Fusible(nodes[c]) && g.meta(nodes[c].outputs[0]) == g.meta(v);
    if (!all_join) continue;
    remat[v] = true;
    any = true;
  }
  if (!any) return false;
  std::vector<ir::Node> result;
  for (ir::Node& node : nodes) {
    if (node.outputs.size() == 1 && remat[node.outputs[0]]) continue;  // each reader has its own copy
    std::map<int, int> copy_of;  // rematerialized value -> this reader's copy
    for (int& v : node.inputs) {
      if (!remat[v]) continue;
      auto it = copy_of.find(v);
      if (it == copy_of.end()) {
        ir::Node copy = nodes[producer[v]];
        copy.outputs = {g.NewValue(g.meta(v))};
        it = copy_of.emplace(v, copy.outputs[0]).first;
        result.push_back(std::move(copy));
      }
      v = it->second;
    }
    result.push_back(std::move(node));
  }
  nodes = std::move(result);
  return true;
}

}  // namespace

absl::StatusOr<bool> ElementwiseFusion::Run(ir::Graph& g) {
  const bool rematerialized = RematerializeUnary(g);
  auto& nodes = g.mutable_nodes();
  const int n = static_cast<int>(nodes.size());
  std::vector<int> producer(g.values().size(), -1);
  for (int i = 0; i < n; ++i)
    for (int v : nodes[i].outputs) producer[v] = i;
  std::vector<int> uses = g.UseCounts();
  std::vector<int> group(n, -1);  // root node index of the node's group
  std::vector<std::vector<int>> members(n);
  int fused_count = 0;
  // Name fused subgraphs after the ones already present.
  for (const ir::Node& node : nodes)
    if (node.op == ir::kFusedOp) ++fused_count;

  for (int root = n - 1; root >= 0; --root) {
    if (group[root] >= 0 || !Fusible(nodes[root])) continue;
    const ir::TensorMeta& out = g.meta(nodes[root].outputs[0]);
    group[root] = root;
    std::vector<int> mem = {root};
    for (size_t k = 0; k < mem.size(); ++k) {
      const ir::Node& m = nodes[mem[k]];
      for (int v : m.inputs) {
        int p = producer[v];
        if (p < 0 || group[p] >= 0 || !Fusible(nodes[p]) || !(g.meta(v) == out)) continue;
        int uses_here = static_cast<int>(std::count(m.inputs.begin(), m.inputs.end(), v));
        if (uses[v] != uses_here) continue;  // used elsewhere or a graph output
        group[p] = root;
        mem.push_back(p);
      }
    }
    if (mem.size() < 2) {
      group[root] = -1;
      continue;
    }
    std::sort(mem.begin(), mem.end());
    members[root] = std::move(mem);
  }

  bool changed = false;
  std::vector<ir::Node> result;
  for (int i = 0; i < n; ++i) {
    if (group[i] < 0) {
      result.push_back(std::move(nodes[i]));
      continue;
    }
    if (group[i] != i) continue;  // a non-root member: emitted with its root
    const std::vector<int>& mem = members[i];
    auto sub = std::make_shared<ir::Graph>(absl::StrCat("fused_", fused_count++));
    std::map<int, int> inner;  // outer value id -> subgraph value id
    std::vector<int> external;
    for (int m : mem)
      for (int v : nodes[m].inputs) {
        int p = producer[v];
        bool internal = p >= 0 && group[p] == i;
        if (!internal && !inner.count(v)) {
          inner[v] = sub->AddInput(absl::StrCat("x", external.size()), g.meta(v));
          external.push_back(v);
        }
      }
    for (int m : mem) {
      ir::Node copy;
      copy.op = nodes[m].op;
      copy.attrs = nodes[m].attrs;
      copy.compute_dtype = nodes[m].compute_dtype;
      copy.origin = nodes[m].origin;
      for (int v : nodes[m].inputs) copy.inputs.push_back(inner.at(v));
      int idx = sub->AddNodeUnchecked(std::move(copy), {g.meta(nodes[m].outputs[0])});
      inner[nodes[m].outputs[0]] = sub->nodes()[idx].outputs[0];
    }
    sub->AddOutput(inner.at(nodes[i].outputs[0]));
    ir::Node fused;
    fused.op = std::string(ir::kFusedOp);
    fused.inputs = external;
    fused.outputs = {nodes[i].outputs[0]};
    fused.origin = nodes[i].origin;  // the root's (the op the group ends in)
    for (size_t k = 0; k < mem.size() && fused.origin.empty(); ++k) fused.origin = nodes[mem[k]].origin;
    fused.subgraph = std::move(sub);
    result.push_back(std::move(fused));
    changed = true;
  }
  nodes = std::move(result);
  return changed || rematerialized;
}

}  // namespace loom::compiler::passes
