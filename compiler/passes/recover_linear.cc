#include "compiler/passes/recover_linear.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace loom::compiler::passes {
namespace {

using recover::GraphIndex;

// Rewrites 1 and 3 on matmul node n; returns the weight's name when the
// transpose is folded ("" otherwise).
std::string FoldTranspose(const GraphIndex& idx, ir::Node& n, std::vector<int>& retired, bool* changed) {
  for (const char* flag : {"trans_a", "trans_b"}) {
    if (n.attrs.Has(flag) && !n.attrs.GetBool(flag, true)) {
      ir::Attrs kept;
      for (const auto& [k, v] : n.attrs.values())
        if (k != flag) kept.Set(k, v);
      n.attrs = kept;
      *changed = true;
    }
  }
  if (n.attrs.GetBool("trans_b", false)) return "";
  const ir::Node* p = idx.DefOp(n.inputs[1], "permute");
  if (p == nullptr || p->attrs.GetInts("dims") != std::vector<int64_t>{1, 0}) return "";
  retired.push_back(n.inputs[1]);
  n.inputs[1] = p->inputs[0];
  n.attrs.Set("trans_b", true);
  *changed = true;
  return idx.Name(p->inputs[0]);
}

}  // namespace

absl::StatusOr<bool> RecoverLinear::Run(ir::Graph& g) {
  bool changed = false;
  const size_t logged = log_ != nullptr ? log_->size() : 0;
  std::vector<int> retired;  // permutes no longer read by their matmul
  const GraphIndex idx(g, nullptr);  // the edits below move no producer
  std::vector<int> user(g.values().size(), -1);  // the last node reading each value
  for (size_t u = 0; u < g.nodes().size(); ++u)
    for (int v : g.nodes()[u].inputs) user[v] = static_cast<int>(u);
  for (int i = static_cast<int>(g.nodes().size()) - 1; i >= 0; --i) {
    ir::Node& n = g.mutable_nodes()[i];
    if (n.op != "matmul" || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
    bool edited = false;
    const std::string weight = FoldTranspose(idx, n, retired, &edited);
    const int out = n.outputs[0];
    std::string bias;
    if (idx.Uses(out) == 1 && user[out] >= 0) {
      ir::Node& a = g.mutable_nodes()[user[out]];
      const Shape& shape = g.meta(out).shape;
      if (a.op == "add" && a.inputs.size() == 2 && a.inputs[1] == out && a.inputs[0] != out &&
          g.meta(a.inputs[0]).shape == Shape{shape.back()} && g.meta(a.outputs[0]).shape == shape) {
        bias = idx.Name(a.inputs[0]);
        std::swap(a.inputs[0], a.inputs[1]);
        edited = true;
      }
    }
    changed = changed || edited;
    if (log_ != nullptr && (!weight.empty() || !bias.empty()))
      log_->push_back(absl::StrCat("linear: x @ ", weight.empty() ? idx.Name(n.inputs[1]) : absl::StrCat(weight, "^T"),
                                   bias.empty() ? "" : absl::StrCat(" + ", bias), " -> matmul",
                                   weight.empty() ? "" : "{trans_b=true}", bias.empty() ? "" : " + add"));
  }
  recover::EraseUnused(g, retired);
  if (log_ != nullptr) std::reverse(log_->begin() + logged, log_->end());  // graph order
  return changed;
}

}  // namespace loom::compiler::passes
