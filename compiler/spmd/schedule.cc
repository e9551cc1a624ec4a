#include "compiler/spmd/schedule.h"

#include <functional>
#include <vector>

#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler::spmd {

absl::StatusOr<bool> ScheduleCollectivesEarly(ir::Graph& g, const ScheduleOptions& options) {
  std::vector<ir::Node>& nodes = g.mutable_nodes();
  const int n = static_cast<int>(nodes.size());
  std::vector<int> producer(g.values().size(), -1);  // value -> node index
  for (int i = 0; i < n; ++i)
    for (int v : nodes[i].outputs) producer[v] = i;
  // anchor[i]: the node a movable node follows (its last input producer), or -1.
  std::vector<int> anchor(n, -1);
  std::vector<bool> movable(n, false);
  for (int i = 0; i < n; ++i) {
    const ir::Node& node = nodes[i];
    int last = -1;
    for (int v : node.inputs) last = std::max(last, producer[v]);
    if (last < 0) continue;  // inputs are graph inputs only: stays
    if (node.op == "reduce_scatter" || (options.all_reduce && node.op == "all_reduce")) {
      movable[i] = true;
    } else if (node.op == "shard_slice" && node.inputs.size() == 1 && movable[last] &&
               nodes[last].op == "all_reduce") {
      movable[i] = true;  // the slice of a moved all_reduce (ZeRO-1) follows it
    }
    if (movable[i]) anchor[i] = last;
  }
  std::vector<std::vector<int>> followers(n);
  for (int i = 0; i < n; ++i)
    if (movable[i]) followers[anchor[i]].push_back(i);
  std::vector<int> order;
  order.reserve(n);
  std::function<void(int)> emit = [&](int i) {
    order.push_back(i);
    for (int f : followers[i]) emit(f);
  };
  for (int i = 0; i < n; ++i)
    if (!movable[i]) emit(i);
  if (static_cast<int>(order.size()) != n) return absl::InternalError("collective scheduling lost nodes");
  bool changed = false;
  for (int i = 0; i < n; ++i) changed |= order[i] != i;
  if (!changed) return false;
  std::vector<ir::Node> reordered;
  reordered.reserve(n);
  for (int i : order) reordered.push_back(std::move(nodes[i]));
  nodes = std::move(reordered);
  LOOM_RETURN_IF_ERROR(Annotate(ir::Verify(g), "collective scheduling"));
  return true;
}

}  // namespace loom::compiler::spmd
