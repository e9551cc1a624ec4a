#include "compiler/passes/dce.h"

namespace loom::compiler::passes {

absl::StatusOr<bool> DeadCodeElimination::Run(ir::Graph& g) {
  std::vector<bool> live(g.values().size(), false);
  for (const ir::GraphOutput& o : g.outputs()) live[o.value] = true;
  auto& nodes = g.mutable_nodes();
  std::vector<bool> keep(nodes.size(), false);
  for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i) {
    for (int v : nodes[i].outputs) keep[i] = keep[i] || live[v];
    if (keep[i])
      for (int v : nodes[i].inputs) live[v] = true;
  }
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes[i]));
  bool changed = kept.size() != nodes.size();
  nodes = std::move(kept);
  return changed;
}

}  // namespace loom::compiler::passes
