#include "compiler/passes/fusion.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::passes {
namespace {

bool Fusible(const ir::Node& n) {
  if (n.op == ir::kFusedOp || n.outputs.size() != 1) return false;
  const kernels::OpDef* def = kernels::OpRegistry::Global().Find(n.op);
  return def != nullptr && def->elementwise && def->num_outputs == 1;
}

}  // namespace

absl::StatusOr<bool> ElementwiseFusion::Run(ir::Graph& g) {
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
  return changed;
}

}  // namespace loom::compiler::passes
