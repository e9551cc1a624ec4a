#include "compiler/passes/recover_positions.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::passes {
namespace {

// Whether t holds 0, 1, ..., numel-1 in order.
bool IsArange(const Tensor& t) {
  if (t.dtype() != DType::kI32 && t.dtype() != DType::kI64) return false;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.GetDouble(i) != static_cast<double>(i)) return false;
  return true;
}

}  // namespace

absl::StatusOr<bool> RecoverPositions::Run(ir::Graph& g) {
  bool changed = false;
  const size_t logged = log_ != nullptr ? log_->size() : 0;
  for (int i = static_cast<int>(g.nodes().size()) - 1; i >= 0; --i) {
    const ir::Node n = g.nodes()[i];  // a copy: AddOp below grows the node list
    const bool gather = n.op == "gather" && n.attrs.GetInt("axis", 0) == 0;
    if ((!gather && n.op != "embedding") || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
    const recover::GraphIndex idx(g, consts_);
    const Tensor* ids = idx.Constant(n.inputs[1]);
    const int table = n.inputs[0];
    const Shape rows = g.meta(table).shape;
    if (ids == nullptr || rows.empty() || ids->numel() == 0 || ids->numel() > rows[0] || !IsArange(*ids)) continue;
    const size_t first_new = g.nodes().size();
    int y = table;
    if (ids->numel() < rows[0]) {
      LOOM_ASSIGN_OR_RETURN(
          y, g.AddOp1("slice", {y}, ir::Attrs{{"axis", int64_t{0}}, {"start", int64_t{0}}, {"length", ids->numel()}}));
    }
    const Shape& want = g.meta(n.outputs[0]).shape;
    if (g.meta(y).shape != want) {
      LOOM_ASSIGN_OR_RETURN(
          y, g.AddOp1("reshape", {y}, ir::Attrs{{"shape", std::vector<int64_t>(want.begin(), want.end())}}));
    }
    if (!(g.meta(y) == g.meta(n.outputs[0]))) return absl::InternalError("recover-positions: the result's type changed");
    if (log_ != nullptr)
      log_->push_back(absl::StrCat("positions: ", n.op, "(", idx.Name(table), ", 0..", ids->numel() - 1, ") -> ",
                                   y == table ? idx.Name(table) : absl::StrCat("rows 0..", ids->numel() - 1, " of ", idx.Name(table))));
    i = recover::Commit(g, first_new, i, n.outputs[0], y);
    changed = true;
  }
  if (log_ != nullptr) std::reverse(log_->begin() + logged, log_->end());  // graph order
  return changed;
}

}  // namespace loom::compiler::passes
