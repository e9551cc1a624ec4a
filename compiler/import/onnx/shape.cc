// Shape ONNX ops: Reshape, Flatten, Transpose, Unsqueeze, Squeeze, Concat,
// Shape, Expand and Tile.
//
// Loom's IR has static shapes, so every shape operand (Reshape's shape,
// Unsqueeze's axes, Expand's shape, Tile's repeats) must be a constant at
// import time; after folding, torch's Shape -> Gather -> Concat chains are.
// Reshape, Unsqueeze, Squeeze and Flatten become `reshape` with the resolved
// shape; Expand becomes `broadcast_to`; Tile becomes one `broadcast_to`
// between two reshapes ([d0, d1] -> [1, d0, 1, d1] -> [r0, d0, r1, d1] ->
// [r0 d0, r1 d1]). Shape is always a constant.
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"

namespace loom::compiler::import::onnx {
namespace {

absl::StatusOr<Val> ReshapeTo(NodeCtx& n, const Val& x, const std::vector<int64_t>& shape) {
  if (std::vector<int64_t>(x.meta.shape.begin(), x.meta.shape.end()) == shape) return x;
  return n.Emit1("reshape", {x}, ir::Attrs{{"shape", shape}});
}

absl::Status Reshape(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"allowzero"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> target, n.ConstInts(1, "the target shape"));
  LOOM_ASSIGN_OR_RETURN(int64_t allowzero, n.AttrInt("allowzero", 0));
  const Shape& in = x.meta.shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowzero) {
      if (i >= in.size()) return n.Error(absl::StrCat("shape entry ", i, " is 0 (copy) but the input has rank ", in.size()));
      target[i] = in[i];
    }
    if (target[i] == -1) {
      if (infer >= 0) return n.Error("the target shape has more than one -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (target[i] < 0) return n.Error(absl::StrCat("shape entry ", i, " is ", target[i]));
    known *= target[i];
  }
  const int64_t numel = NumElements(in);
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      return n.Error(absl::StrCat("cannot infer the -1 of ", ShapeToString(target), " from ", ShapeToString(in)));
    target[infer] = numel / known;
  }
  LOOM_ASSIGN_OR_RETURN(Val y, ReshapeTo(n, x, target));
  return n.SetOut(0, y);
}

absl::Status Flatten(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axis"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  const int rank = static_cast<int>(x.meta.shape.size());
  LOOM_ASSIGN_OR_RETURN(int64_t a, n.AttrInt("axis", 1));
  if (a < -rank || a > rank) return n.Error(absl::StrCat("axis ", a, " is out of range for rank ", rank));
  if (a < 0) a += rank;
  int64_t lead = 1, rest = 1;
  for (int i = 0; i < rank; ++i) (i < a ? lead : rest) *= x.meta.shape[i];
  LOOM_ASSIGN_OR_RETURN(Val y, ReshapeTo(n, x, {lead, rest}));
  return n.SetOut(0, y);
}

absl::Status Transpose(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"perm"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, n.AttrInts("perm"));
  const int rank = static_cast<int>(x.meta.shape.size());
  if (!n.HasAttr("perm"))
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int>(perm.size()) != rank)
    return n.Error(absl::StrCat("perm has ", perm.size(), " entries for a rank-", rank, " input"));
  bool identity = true;
  for (int i = 0; i < rank; ++i) identity = identity && perm[i] == i;
  if (identity) return n.SetOut(0, x);
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("permute", {x}, ir::Attrs{{"dims", perm}}));
  return n.SetOut(0, y);
}

// Axes from the attribute (before opset 13) or input 1 (13 on).
absl::StatusOr<std::vector<int64_t>> AxesOf(NodeCtx& n, bool* given) {
  if (n.opset() >= 13) {
    *given = n.HasInput(1);
    if (!*given) return std::vector<int64_t>{};
    return n.ConstInts(1, "axes");
  }
  *given = n.HasAttr("axes");
  return n.AttrInts("axes");
}

absl::Status Unsqueeze(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axes"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  bool given = false;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(n, &given));
  LOOM_RETURN_IF_ERROR(n.Check(given, "axes are required"));
  const int out_rank = static_cast<int>(x.meta.shape.size() + axes.size());
  std::vector<bool> is_new(out_rank, false);
  for (int64_t a : axes) {
    LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, a, out_rank, "axis"));
    if (is_new[ax]) return n.Error(absl::StrCat("axis ", a, " is repeated"));
    is_new[ax] = true;
  }
  std::vector<int64_t> shape;
  size_t k = 0;
  for (int i = 0; i < out_rank; ++i) shape.push_back(is_new[i] ? 1 : x.meta.shape[k++]);
  LOOM_ASSIGN_OR_RETURN(Val y, ReshapeTo(n, x, shape));
  return n.SetOut(0, y);
}

absl::Status Squeeze(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axes"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  bool given = false;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(n, &given));
  const int rank = static_cast<int>(x.meta.shape.size());
  std::vector<bool> drop(rank, !given);
  if (!given)
    for (int i = 0; i < rank; ++i) drop[i] = x.meta.shape[i] == 1;
  for (int64_t a : axes) {
    LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, a, rank, "axis"));
    if (x.meta.shape[ax] != 1)
      return n.Error(absl::StrCat("axis ", a, " has size ", x.meta.shape[ax], ", not 1"));
    drop[ax] = true;
  }
  std::vector<int64_t> shape;
  for (int i = 0; i < rank; ++i)
    if (!drop[i]) shape.push_back(x.meta.shape[i]);
  LOOM_ASSIGN_OR_RETURN(Val y, ReshapeTo(n, x, shape));
  return n.SetOut(0, y);
}

absl::Status Concat(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axis"}));
  LOOM_RETURN_IF_ERROR(n.Check(n.HasAttr("axis"), "attribute 'axis' is required"));
  LOOM_ASSIGN_OR_RETURN(int64_t axis, n.AttrInt("axis", 0));
  std::vector<Val> ins;
  for (int i = 0; i < n.NumInputs(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Val v, n.In(i));
    ins.push_back(std::move(v));
  }
  LOOM_RETURN_IF_ERROR(n.Check(!ins.empty(), "needs at least one input"));
  if (ins.size() == 1) return n.SetOut(0, ins[0]);
  LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, axis, static_cast<int>(ins[0].meta.shape.size()), "axis"));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("concat", ins, ir::Attrs{{"axis", int64_t{ax}}}));
  return n.SetOut(0, y);
}

absl::Status ShapeOp(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"start", "end"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  const int64_t rank = static_cast<int64_t>(x.meta.shape.size());
  LOOM_ASSIGN_OR_RETURN(int64_t start, n.AttrInt("start", 0));
  LOOM_ASSIGN_OR_RETURN(int64_t end, n.AttrInt("end", rank));
  auto clamp = [rank](int64_t v) { return std::min(std::max(v < 0 ? v + rank : v, int64_t{0}), rank); };
  start = clamp(start);
  end = clamp(end);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(x.meta.shape[i]);
  return n.SetOut(0, n.Const(IntTensor(dims, {static_cast<int64_t>(dims.size())}, DType::kI64)));
}

// numpy broadcast of two shapes, or an error naming both.
absl::StatusOr<std::vector<int64_t>> Broadcast(const NodeCtx& n, absl::Span<const int64_t> a,
                                               absl::Span<const int64_t> b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return n.Error(absl::StrCat("shapes ", ShapeToString(a), " and ", ShapeToString(b), " do not broadcast"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::Status Expand(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, n.ConstInts(1, "the target shape"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> out, Broadcast(n, x.meta.shape, shape));
  if (out == ShapeVec(x.meta.shape)) return n.SetOut(0, x);
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("broadcast_to", {x}, ir::Attrs{{"shape", out}}));
  return n.SetOut(0, y);
}

absl::Status Tile(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> reps, n.ConstInts(1, "repeats"));
  const Shape& s = x.meta.shape;
  if (reps.size() != s.size())
    return n.Error(absl::StrCat("repeats has ", reps.size(), " entries for a rank-", s.size(), " input"));
  std::vector<int64_t> split, tiled, out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (reps[i] < 0) return n.Error(absl::StrCat("repeats[", i, "] is negative (", reps[i], ")"));
    split.insert(split.end(), {1, s[i]});
    tiled.insert(tiled.end(), {reps[i], s[i]});
    out.push_back(reps[i] * s[i]);
  }
  if (out == ShapeVec(s)) return n.SetOut(0, x);
  LOOM_ASSIGN_OR_RETURN(Val a, ReshapeTo(n, x, split));
  LOOM_ASSIGN_OR_RETURN(Val b, n.Emit1("broadcast_to", {a}, ir::Attrs{{"shape", tiled}}));
  LOOM_ASSIGN_OR_RETURN(Val y, ReshapeTo(n, b, out));
  return n.SetOut(0, y);
}

}  // namespace

std::vector<OpEntry> ShapeOps() {
  return {
      {"Reshape", "shape", 7, "reshape", Reshape},
      {"Flatten", "shape", 7, "reshape", Flatten},
      {"Transpose", "shape", 7, "permute", Transpose},
      {"Unsqueeze", "shape", 7, "reshape", Unsqueeze},
      {"Squeeze", "shape", 7, "reshape", Squeeze},
      {"Concat", "shape", 7, "concat", Concat},
      {"Shape", "shape", 7, "constant", ShapeOp},
      {"Expand", "shape", 8, "broadcast_to", Expand},
      {"Tile", "shape", 7, "reshape + broadcast_to", Tile},
  };
}

}  // namespace loom::compiler::import::onnx
