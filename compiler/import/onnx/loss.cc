// Losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
//
// Fast path: SoftmaxCrossEntropyLoss with mean reduction, no class weights and
// no log_prob output is the registry's fused `cross_entropy` over
// [rows, classes] (the class axis moved last and the rest flattened), with
// ignore_index passed through. Its loss is 0, not NaN, when every target is
// ignored.
//
// General path (any weights, reduction, ignore_index, extra dims):
//   logp    = log_softmax(scores, axis 1)            (SCE; NLL takes it as input)
//   logp_t  = logp with the class axis moved last    [N, d..., C]
//   onehot  = equal(labels[..., None], iota(C))      bool [N, d..., C]
//   picked  = sum(where(onehot, logp_t, 0), -1)      [N, d...]
//   w       = sum(where(onehot, weight, 0), -1) or 1, then 0 where label == ignore_index
//   loss_i  = -picked * w
//   none: loss_i; sum: sum(loss_i); mean: sum(loss_i) / sum(w)
// Labels outside [0, C) pick nothing (0), as if ignored.
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"

namespace loom::compiler::import::onnx {
namespace {

struct LossArgs {
  Val x;       // scores (SCE) or log-probabilities (NLL), [N, C, d...]
  Val labels;  // [N, d...]
  bool has_weight = false;
  Val weight;  // [C]
  std::string reduction;
  bool has_ii = false;
  int64_t ii = 0;
};

absl::StatusOr<LossArgs> ReadArgs(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"reduction", "ignore_index"}));
  LossArgs a;
  LOOM_ASSIGN_OR_RETURN(a.x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(a.labels, n.In(1));
  a.has_weight = n.HasInput(2);
  if (a.has_weight) {
    LOOM_ASSIGN_OR_RETURN(a.weight, n.In(2));
  }
  LOOM_ASSIGN_OR_RETURN(a.reduction, n.AttrString("reduction", "mean"));
  a.has_ii = n.HasAttr("ignore_index");
  LOOM_ASSIGN_OR_RETURN(a.ii, n.AttrInt("ignore_index", 0));
  const Shape& xs = a.x.meta.shape;
  const Shape& ls = a.labels.meta.shape;
  if (a.reduction != "mean" && a.reduction != "sum" && a.reduction != "none")
    return n.Error(absl::StrCat("reduction '", a.reduction, "' is not one of none, sum, mean"));
  if (!IsFloating(a.x.meta.dtype)) return n.Error("scores must be floating");
  if (a.labels.meta.dtype != DType::kI32 && a.labels.meta.dtype != DType::kI64)
    return n.Error(absl::StrCat("labels must be int32 or int64, got ", DTypeName(a.labels.meta.dtype)));
  bool ok = xs.size() >= 2 && ls.size() == xs.size() - 1 && ls[0] == xs[0];
  for (size_t i = 1; ok && i < ls.size(); ++i) ok = ls[i] == xs[i + 1];
  if (!ok) return n.Error(absl::StrCat("labels ", ShapeToString(ls), " do not match scores ", ShapeToString(xs),
                                       " ([N, C, d...] and [N, d...])"));
  if (a.has_weight && (a.weight.meta.shape != Shape{xs[1]} || a.weight.meta.dtype != a.x.meta.dtype))
    return n.Error(absl::StrCat("weights must be [", xs[1], "] of the scores' dtype"));
  return a;
}

// x [N, C, d...] -> [N, d..., C]
absl::StatusOr<Val> ClassLast(NodeCtx& n, const Val& x) {
  const int r = static_cast<int>(x.meta.shape.size());
  if (r == 2) return x;
  std::vector<int64_t> perm = {0};
  for (int i = 2; i < r; ++i) perm.push_back(i);
  perm.push_back(1);
  return n.Emit1("permute", {x}, ir::Attrs{{"dims", perm}});
}

absl::StatusOr<Val> FastCrossEntropy(NodeCtx& n, const LossArgs& a) {
  LOOM_ASSIGN_OR_RETURN(Val xt, ClassLast(n, a.x));
  const int64_t c = a.x.meta.shape[1];
  const int64_t rows = NumElements(a.labels.meta.shape);
  LOOM_ASSIGN_OR_RETURN(Val x2, n.Emit1("reshape", {xt}, ir::Attrs{{"shape", std::vector<int64_t>{rows, c}}}));
  LOOM_ASSIGN_OR_RETURN(Val l1, n.Emit1("reshape", {a.labels}, ir::Attrs{{"shape", std::vector<int64_t>{rows}}}));
  const int64_t ii = a.has_ii ? a.ii : std::numeric_limits<int64_t>::min();
  LOOM_ASSIGN_OR_RETURN(std::vector<Val> r, n.Emit("cross_entropy", {x2, l1}, ir::Attrs{{"ignore_index", ii}}));
  return r[0];
}

absl::StatusOr<Val> NllFromLogProb(NodeCtx& n, const LossArgs& a, const Val& logp) {
  const DType fdt = a.x.meta.dtype, ldt = a.labels.meta.dtype;
  const int64_t c = a.x.meta.shape[1];
  LOOM_ASSIGN_OR_RETURN(Val lt, ClassLast(n, logp));
  std::vector<int64_t> ids(c);
  for (int64_t i = 0; i < c; ++i) ids[i] = i;
  std::vector<int64_t> l_shape = ShapeVec(a.labels.meta.shape);
  l_shape.push_back(1);
  LOOM_ASSIGN_OR_RETURN(Val l_col, n.Emit1("reshape", {a.labels}, ir::Attrs{{"shape", l_shape}}));
  LOOM_ASSIGN_OR_RETURN(Val onehot, n.Emit1("equal", {l_col, n.Const(IntTensor(ids, {c}, ldt))}));
  LOOM_ASSIGN_OR_RETURN(Val zero, n.Scalar(0, fdt));
  LOOM_ASSIGN_OR_RETURN(Val one, n.Scalar(1, fdt));
  const ir::Attrs last{{"axes", std::vector<int64_t>{-1}}, {"keepdim", false}};
  LOOM_ASSIGN_OR_RETURN(Val sel, n.Emit1("where", {onehot, lt, zero}));
  LOOM_ASSIGN_OR_RETURN(Val picked, n.Emit1("sum", {sel}, last));
  Val w;
  if (a.has_weight) {
    LOOM_ASSIGN_OR_RETURN(Val wsel, n.Emit1("where", {onehot, a.weight, zero}));
    LOOM_ASSIGN_OR_RETURN(w, n.Emit1("sum", {wsel}, last));
  } else {
    LOOM_ASSIGN_OR_RETURN(w, n.Emit1("broadcast_to", {one}, ir::Attrs{{"shape", ShapeVec(a.labels.meta.shape)}}));
  }
  if (a.has_ii) {
    LOOM_ASSIGN_OR_RETURN(Val iiv, n.Scalar(static_cast<double>(a.ii), ldt));
    LOOM_ASSIGN_OR_RETURN(Val ignored, n.Emit1("equal", {a.labels, iiv}));
    LOOM_ASSIGN_OR_RETURN(w, n.Emit1("where", {ignored, zero, w}));
  }
  LOOM_ASSIGN_OR_RETURN(Val pw, n.Emit1("mul", {picked, w}));
  LOOM_ASSIGN_OR_RETURN(Val loss, n.Emit1("neg", {pw}));
  if (a.reduction == "none") return loss;
  LOOM_ASSIGN_OR_RETURN(Val total, n.Emit1("sum", {loss}));
  if (a.reduction == "sum") return total;
  LOOM_ASSIGN_OR_RETURN(Val wsum, n.Emit1("sum", {w}));
  return n.Emit1("div", {total, wsum});
}

absl::Status SoftmaxCrossEntropy(NodeCtx& n) {
  LOOM_ASSIGN_OR_RETURN(LossArgs a, ReadArgs(n));
  if (a.reduction == "mean" && !a.has_weight && !n.WantsOutput(1)) {
    LOOM_ASSIGN_OR_RETURN(Val loss, FastCrossEntropy(n, a));
    return n.SetOut(0, loss);
  }
  LOOM_ASSIGN_OR_RETURN(Val logp, n.Emit1("log_softmax", {a.x}, ir::Attrs{{"axis", int64_t{1}}}));
  LOOM_ASSIGN_OR_RETURN(Val loss, NllFromLogProb(n, a, logp));
  LOOM_RETURN_IF_ERROR(n.SetOut(0, loss));
  return n.SetOut(1, logp);
}

absl::Status NegativeLogLikelihood(NodeCtx& n) {
  LOOM_ASSIGN_OR_RETURN(LossArgs a, ReadArgs(n));
  LOOM_ASSIGN_OR_RETURN(Val loss, NllFromLogProb(n, a, a.x));
  return n.SetOut(0, loss);
}

}  // namespace

std::vector<OpEntry> LossOps() {
  return {
      {"SoftmaxCrossEntropyLoss", "loss", 12, "cross_entropy | log_softmax, equal, where, sum", SoftmaxCrossEntropy},
      {"NegativeLogLikelihoodLoss", "loss", 12, "equal, where, sum, div", NegativeLogLikelihood},
  };
}

}  // namespace loom::compiler::import::onnx
