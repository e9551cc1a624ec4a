#include "compiler/passes/checkpointing.h"

#include <algorithm>
#include <map>
#include <vector>

namespace loom::compiler::passes {
namespace {

// Whether each node is a forward op: an ancestor of output 0 (the loss).
std::vector<bool> ForwardNodes(const ir::Graph& g, const std::vector<int>& producer) {
  std::vector<bool> fwd(g.nodes().size(), false);
  if (g.outputs().empty()) return fwd;
  std::vector<int> stack = {g.outputs()[0].value};
  std::vector<bool> seen(g.values().size(), false);
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (seen[v]) continue;
    seen[v] = true;
    const int n = producer[v];
    if (n < 0 || fwd[n]) continue;
    fwd[n] = true;
    for (int in : g.nodes()[n].inputs) stack.push_back(in);
  }
  return fwd;
}

// The block of each forward node (-1: none), per the header's segment rule.
std::vector<int> Segments(const ir::Graph& g, const std::vector<bool>& fwd,
                          const std::function<int(const std::string&)>& block_of) {
  std::map<int, int> param_block;  // value id -> block (-1 for other params)
  for (const ir::GraphInput& in : g.inputs())
    if (in.kind == ir::InputKind::kParam) param_block[in.value] = block_of(in.name);
  std::vector<int> seg(g.nodes().size(), -1);
  int current = -1;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (!fwd[i]) continue;
    for (int in : g.nodes()[i].inputs) {
      auto it = param_block.find(in);
      if (it != param_block.end() && it->second != current) {
        current = it->second;
        break;
      }
    }
    seg[i] = current;
  }
  return seg;
}

}  // namespace

bool IsKeptSelectively(absl::string_view op) {
  return op == "matmul" || op == "sdpa" || op == "all_reduce" || op == "all_gather" || op == "reduce_scatter";
}

absl::StatusOr<bool> ActivationCheckpointing::Run(ir::Graph& g) {
  const std::vector<ir::Node>& nodes = g.nodes();
  std::vector<int> producer(g.values().size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].outputs) producer[v] = static_cast<int>(i);
  const std::vector<bool> fwd = ForwardNodes(g, producer);
  const std::vector<int> seg = Segments(g, fwd, block_of_);
  auto seg_of_value = [&](int v) { return producer[v] < 0 ? -1 : seg[producer[v]]; };
  auto kept_op = [&](int node) { return selective_ && IsKeptSelectively(nodes[node].op); };

  // Values to recompute: a segment's values that backward ops read and no
  // forward op of another segment reads. insert_at[b]: the first such read.
  std::vector<bool> kept(g.values().size(), false), recompute(g.values().size(), false);
  std::map<int, int> insert_at;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (fwd[i])
      for (int in : nodes[i].inputs)
        if (seg_of_value(in) != seg[i]) kept[in] = true;
  for (const ir::GraphOutput& o : g.outputs()) kept[o.value] = true;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (fwd[i]) continue;
    for (int in : nodes[i].inputs) {
      const int b = seg_of_value(in);
      if (b < 0 || kept[in] || !fwd[producer[in]] || kept_op(producer[in])) continue;
      recompute[in] = true;
      if (!insert_at.count(b)) insert_at[b] = static_cast<int>(i);
    }
  }
  if (insert_at.empty()) return false;

  // Clone every forward op of those segments before its insertion point.
  std::map<int, std::vector<int>> clones_before;  // node index -> segments
  for (const auto& [b, at] : insert_at) clones_before[at].push_back(b);
  std::vector<int> clone_of(g.values().size(), -1);
  std::vector<ir::Node> out;
  out.reserve(nodes.size() * 2);
  const std::vector<ir::Node> original = nodes;
  for (size_t i = 0; i < original.size(); ++i) {
    for (int b : clones_before[static_cast<int>(i)]) {
      for (size_t k = 0; k < original.size(); ++k) {
        if (!fwd[k] || seg[k] != b) continue;
        if (kept_op(static_cast<int>(k))) {  // selective: the clones read the original outputs
          for (int v : original[k].outputs) clone_of[v] = v;
          continue;
        }
        ir::Node c = original[k];
        for (int& in : c.inputs)
          if (seg_of_value(in) == b && clone_of[in] >= 0) in = clone_of[in];
        for (int& v : c.outputs) {
          const int nv = g.NewValue(g.meta(v));
          clone_of[v] = nv;
          v = nv;
        }
        out.push_back(std::move(c));
      }
    }
    ir::Node n = original[i];
    if (!fwd[i])
      for (int& in : n.inputs)
        if (recompute[in]) in = clone_of[in];
    out.push_back(std::move(n));
  }
  g.mutable_nodes() = std::move(out);
  return true;
}

}  // namespace loom::compiler::passes
