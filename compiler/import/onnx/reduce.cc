// Reductions: ReduceSum, ReduceMean and ReduceMax -> the registry's sum, mean
// and max (attrs axes, keepdim). Axes come from the attribute, or for
// ReduceSum from opset 13 on from input 1; absent axes reduce everything,
// except ReduceSum's noop_with_empty_axes, which makes them the identity.
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"

namespace loom::compiler::import::onnx {
namespace {

absl::Status Reduce(NodeCtx& n, const std::string& op, bool axes_input) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axes", "keepdims", "noop_with_empty_axes"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(int64_t keepdims, n.AttrInt("keepdims", 1));
  LOOM_ASSIGN_OR_RETURN(int64_t noop, n.AttrInt("noop_with_empty_axes", 0));
  std::vector<int64_t> axes;
  if (axes_input) {
    if (n.HasInput(1)) {
      LOOM_ASSIGN_OR_RETURN(axes, n.ConstInts(1, "axes"));
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(axes, n.AttrInts("axes"));
  }
  if (axes.empty() && noop) return n.SetOut(0, x);
  const int rank = static_cast<int>(x.meta.shape.size());
  std::vector<bool> seen(rank, false);
  for (int64_t& a : axes) {
    LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, a, rank, "axis"));
    if (seen[ax]) return n.Error(absl::StrCat("axis ", a, " is repeated"));
    seen[ax] = true;
    a = ax;
  }
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  if (rank == 0) return n.SetOut(0, x);
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1(op, {x}, ir::Attrs{{"axes", axes}, {"keepdim", keepdims != 0}}));
  return n.SetOut(0, y);
}

}  // namespace

std::vector<OpEntry> ReduceOps() {
  return {
      {"ReduceSum", "reduce", 7, "sum", [](NodeCtx& n) { return Reduce(n, "sum", n.opset() >= 13); }},
      {"ReduceMean", "reduce", 7, "mean", [](NodeCtx& n) { return Reduce(n, "mean", false); }},
      {"ReduceMax", "reduce", 7, "max", [](NodeCtx& n) { return Reduce(n, "max", false); }},
  };
}

}  // namespace loom::compiler::import::onnx
