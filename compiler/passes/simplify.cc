#include "compiler/passes/simplify.h"

#include <algorithm>
#include <map>
#include <vector>

#include "base/status.h"

namespace loom::compiler::passes {
namespace {

// Index of the node defining each value (-1 for graph inputs).
std::vector<int> Producers(const ir::Graph& g) {
  std::vector<int> prod(g.values().size(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].outputs) prod[v] = static_cast<int>(i);
  return prod;
}

// Rewrite 1. Returns whether node `i` (a sum_to) was replaced.
absl::StatusOr<bool> BatchedWeightGrad(ir::Graph& g, int i, const std::vector<int>& prod,
                                       const std::vector<int>& uses) {
  const ir::Node s = g.nodes()[i];
  if (s.op != "sum_to" || s.inputs.size() != 1 || s.outputs.size() != 1) return false;
  int p = prod[s.inputs[0]];
  if (p < 0 || uses[s.inputs[0]] != 1) return false;
  const ir::Node m = g.nodes()[p];
  if (m.op != "matmul" || m.inputs.size() != 2 || m.outputs.size() != 1) return false;
  if (!m.attrs.GetBool("trans_a", false) || m.attrs.GetBool("trans_b", false)) return false;
  const Shape a = g.meta(m.inputs[0]).shape;  // copies: AddOp1 below grows the value table
  const Shape b = g.meta(m.inputs[1]).shape;
  const Shape out = g.meta(m.outputs[0]).shape;
  const Shape want = g.meta(s.outputs[0]).shape;
  if (a.size() != 3 || b.size() != 3 || out.size() != 3 || a[0] != b[0] || a[1] != b[1]) return false;
  if (want.size() != 2 || want[0] != out[1] || want[1] != out[2]) return false;
  if (g.meta(m.inputs[0]).dtype != g.meta(m.inputs[1]).dtype) return false;
  LOOM_ASSIGN_OR_RETURN(
      int ra, g.AddOp1("reshape", {m.inputs[0]}, ir::Attrs{{"shape", std::vector<int64_t>{a[0] * a[1], a[2]}}}));
  LOOM_ASSIGN_OR_RETURN(
      int rb, g.AddOp1("reshape", {m.inputs[1]}, ir::Attrs{{"shape", std::vector<int64_t>{b[0] * b[1], b[2]}}}));
  ir::Attrs attrs = m.attrs;
  attrs.Set("trans_a", true);
  attrs.Set("trans_b", false);
  LOOM_ASSIGN_OR_RETURN(int mm, g.AddOp1("matmul", {ra, rb}, attrs));
  if (g.meta(mm).shape != want || g.meta(mm).dtype != g.meta(s.outputs[0]).dtype)
    return absl::InternalError("simplify: batched weight gradient rewrite changed the result's meta");
  g.ReplaceAllUses(s.outputs[0], mm);
  return true;
}

struct Leaf {
  int64_t start, len;
  int value;  // the slice gradient (slice_backward's input)
};

// Collects the slice_backward leaves of the add tree rooted at value v.
bool CollectLeaves(const ir::Graph& g, int v, bool root, const std::vector<int>& prod, const std::vector<int>& uses,
                   int64_t* axis, int64_t* full, std::vector<Leaf>* leaves) {
  int p = prod[v];
  if (p < 0) return false;
  const ir::Node& n = g.nodes()[p];
  if (!root && uses[v] != 1) return false;
  if (n.op == "add" && n.inputs.size() == 2) {
    return CollectLeaves(g, n.inputs[0], false, prod, uses, axis, full, leaves) &&
           CollectLeaves(g, n.inputs[1], false, prod, uses, axis, full, leaves);
  }
  if (n.op != "slice_backward" || n.inputs.size() != 1 || n.attrs.GetInt("step", 1) != 1) return false;
  int64_t ax = n.attrs.GetInt("axis"), fl = n.attrs.GetInt("full_len"), st = n.attrs.GetInt("start");
  const Shape& in = g.meta(n.inputs[0]).shape;
  if (ax < 0) ax += static_cast<int64_t>(in.size());
  if (ax < 0 || ax >= static_cast<int64_t>(in.size())) return false;
  if (leaves->empty()) {
    *axis = ax;
    *full = fl;
  } else if (*axis != ax || *full != fl) {
    return false;
  }
  leaves->push_back({st, in[ax], n.inputs[0]});
  return true;
}

// Rewrite 2. Returns whether the add node `i` was replaced by a concat.
absl::StatusOr<bool> SliceGradConcat(ir::Graph& g, int i, const std::vector<int>& prod, const std::vector<int>& uses) {
  const ir::Node n = g.nodes()[i];
  if (n.op != "add" || n.outputs.size() != 1) return false;
  int64_t axis = 0, full = 0;
  std::vector<Leaf> leaves;
  if (!CollectLeaves(g, n.outputs[0], true, prod, uses, &axis, &full, &leaves) || leaves.size() < 2) return false;
  std::sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) { return a.start < b.start; });
  int64_t at = 0;
  for (const Leaf& l : leaves) {
    if (l.start != at) return false;  // a gap or an overlap
    at += l.len;
  }
  if (at != full) return false;
  for (const Leaf& l : leaves)
    if (g.meta(l.value).dtype != g.meta(n.outputs[0]).dtype) return false;
  std::vector<int> parts;
  for (const Leaf& l : leaves) parts.push_back(l.value);
  LOOM_ASSIGN_OR_RETURN(int c, g.AddOp1("concat", parts, ir::Attrs{{"axis", axis}}));
  if (g.meta(c).shape != g.meta(n.outputs[0]).shape)
    return absl::InternalError("simplify: slice-gradient concat changed the result's shape");
  g.ReplaceAllUses(n.outputs[0], c);
  return true;
}

// Moves the nodes appended since `first_new` to position `at` (before the
// node they replace), so the rewrite keeps the schedule of the graph it was
// given: their inputs are produced before `at` and their users come after it.
void MoveAppendedTo(ir::Graph& g, size_t first_new, int at) {
  std::vector<ir::Node>& nodes = g.mutable_nodes();
  std::rotate(nodes.begin() + at, nodes.begin() + static_cast<std::ptrdiff_t>(first_new), nodes.end());
}

}  // namespace

absl::StatusOr<bool> AlgebraicSimplification::Run(ir::Graph& g) {
  bool changed = false;
  // Outermost first: walk the original nodes backwards so an add tree is taken
  // at its root, and recompute producers/uses after each rewrite (cheap at
  // these graph sizes, and it keeps every check on the current graph). A
  // rewrite's new nodes take the replaced node's place in the order, so the
  // nodes below i keep their indices and the graph keeps its schedule (the
  // collective scheduling of compiler/spmd runs before this pass).
  const int original = static_cast<int>(g.nodes().size());
  for (int i = original - 1; i >= 0; --i) {
    std::vector<int> prod = Producers(g);
    std::vector<int> uses = g.UseCounts();
    const ir::Node& n = g.nodes()[i];
    if (n.outputs.size() != 1 || uses[n.outputs[0]] == 0) continue;  // not a candidate, or already replaced
    const size_t first_new = g.nodes().size();
    LOOM_ASSIGN_OR_RETURN(bool a, BatchedWeightGrad(g, i, prod, uses));
    bool b = false;
    if (!a) {
      LOOM_ASSIGN_OR_RETURN(b, SliceGradConcat(g, i, prod, uses));
    }
    if (a || b) MoveAppendedTo(g, first_new, i);
    changed = changed || a || b;
  }
  return changed;
}

}  // namespace loom::compiler::passes
