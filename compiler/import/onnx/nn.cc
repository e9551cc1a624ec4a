// Neural-network ONNX ops: MatMul, Gemm, Softmax, LogSoftmax,
// LayerNormalization and Dropout.
//
//   MatMul      matmul; 1-D operands are reshaped to matrices and back (numpy).
//   Gemm        matmul(trans_a, trans_b), scale by alpha, + beta * C.
//   Softmax     softmax / log_softmax over one axis (opset 13 on); before 13
//               the input is coerced to 2-D at `axis` and back.
//   LayerNorm   layernorm when over the last axis; over axes [axis, rank) the
//               input is flattened to [lead, rest] first (the same statistics),
//               scale and bias broadcast to the normalized shape. Mean and
//               InvStdDev, when used, are computed by mean/sub/mul/rsqrt (so
//               gradients reach them) in ONNX's keep-dims shape.
//   Dropout     identity outside training (training_mode false, or opsets
//               before 12); in training the registry's dropout with the ratio
//               and seed (training.h feeds it the step as its mask offset);
//               the mask output is greater(dropout(ones_like(x)), 0), the
//               same mask regenerated.
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"
#include "compiler/import/onnx/tensor_proto.h"

namespace loom::compiler::import::onnx {
namespace {

absl::StatusOr<Val> Reshape(NodeCtx& n, const Val& x, std::vector<int64_t> shape) {
  if (ShapeVec(x.meta.shape) == shape) return x;
  return n.Emit1("reshape", {x}, ir::Attrs{{"shape", std::move(shape)}});
}

absl::Status MatMul(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val a, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val b, n.In(1));
  const bool a1 = a.meta.shape.size() == 1, b1 = b.meta.shape.size() == 1;
  LOOM_RETURN_IF_ERROR(n.Check(!a.meta.shape.empty() && !b.meta.shape.empty(), "operands must have rank >= 1"));
  if (a1) {
    LOOM_ASSIGN_OR_RETURN(a, Reshape(n, a, {1, a.meta.shape[0]}));
  }
  if (b1) {
    LOOM_ASSIGN_OR_RETURN(b, Reshape(n, b, {b.meta.shape[0], 1}));
  }
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("matmul", {a, b}));
  if (a1 || b1) {
    std::vector<int64_t> s = ShapeVec(y.meta.shape);
    if (b1) s.erase(s.end() - 1);
    if (a1) s.erase(s.end() - (b1 ? 1 : 2));
    LOOM_ASSIGN_OR_RETURN(y, Reshape(n, y, s));
  }
  return n.SetOut(0, y);
}

absl::Status Gemm(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"alpha", "beta", "transA", "transB"}));
  LOOM_ASSIGN_OR_RETURN(Val a, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val b, n.In(1));
  LOOM_ASSIGN_OR_RETURN(double alpha, n.AttrFloat("alpha", 1.0));
  LOOM_ASSIGN_OR_RETURN(double beta, n.AttrFloat("beta", 1.0));
  LOOM_ASSIGN_OR_RETURN(int64_t ta, n.AttrInt("transA", 0));
  LOOM_ASSIGN_OR_RETURN(int64_t tb, n.AttrInt("transB", 0));
  LOOM_RETURN_IF_ERROR(n.Check(a.meta.shape.size() == 2 && b.meta.shape.size() == 2, "A and B must be matrices"));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("matmul", {a, b}, ir::Attrs{{"trans_a", ta != 0}, {"trans_b", tb != 0}}));
  if (alpha != 1.0) {
    LOOM_ASSIGN_OR_RETURN(y, n.Emit1("scale", {y}, ir::Attrs{{"s", alpha}}));
  }
  if (n.HasInput(2) && beta != 0.0) {
    LOOM_ASSIGN_OR_RETURN(Val c, n.In(2));
    if (beta != 1.0) {
      LOOM_ASSIGN_OR_RETURN(c, n.Emit1("scale", {c}, ir::Attrs{{"s", beta}}));
    }
    LOOM_ASSIGN_OR_RETURN(Val sum, n.Emit1("add", {y, c}));
    if (sum.meta.shape != y.meta.shape) return n.Error("C does not broadcast to the product's shape");
    y = sum;
  }
  return n.SetOut(0, y);
}

absl::Status Softmax(NodeCtx& n, const std::string& op) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axis"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  const int rank = static_cast<int>(x.meta.shape.size());
  const bool coerce = n.opset() < 13;
  LOOM_ASSIGN_OR_RETURN(int64_t a, n.AttrInt("axis", coerce ? 1 : -1));
  LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, a, rank, "axis"));
  if (!coerce || ax == rank - 1) {
    LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1(op, {x}, ir::Attrs{{"axis", int64_t{ax}}}));
    return n.SetOut(0, y);
  }
  int64_t lead = 1, rest = 1;
  for (int i = 0; i < rank; ++i) (i < ax ? lead : rest) *= x.meta.shape[i];
  LOOM_ASSIGN_OR_RETURN(Val flat, Reshape(n, x, {lead, rest}));
  LOOM_ASSIGN_OR_RETURN(Val s, n.Emit1(op, {flat}, ir::Attrs{{"axis", int64_t{-1}}}));
  LOOM_ASSIGN_OR_RETURN(Val y, Reshape(n, s, ShapeVec(x.meta.shape)));
  return n.SetOut(0, y);
}

// Scale or bias as a vector over the normalized (flattened) dims.
absl::StatusOr<Val> NormVector(NodeCtx& n, const Val& v, const std::vector<int64_t>& norm_shape, int64_t count) {
  Val b = v;
  if (ShapeVec(v.meta.shape) != norm_shape) {
    LOOM_ASSIGN_OR_RETURN(b, n.Emit1("broadcast_to", {v}, ir::Attrs{{"shape", norm_shape}}));
  }
  return Reshape(n, b, {count});
}

absl::Status LayerNorm(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"axis", "epsilon", "stash_type"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val scale, n.In(1));
  LOOM_ASSIGN_OR_RETURN(int64_t a, n.AttrInt("axis", -1));
  LOOM_ASSIGN_OR_RETURN(double eps, n.AttrFloat("epsilon", 1e-5));
  const int rank = static_cast<int>(x.meta.shape.size());
  LOOM_RETURN_IF_ERROR(n.Check(rank >= 1, "input must have rank >= 1"));
  LOOM_ASSIGN_OR_RETURN(int ax, NormAxis(n, a, rank, "axis"));
  std::vector<int64_t> lead_shape, norm_shape;
  int64_t lead = 1, count = 1;
  for (int i = 0; i < rank; ++i) {
    (i < ax ? lead_shape : norm_shape).push_back(x.meta.shape[i]);
    (i < ax ? lead : count) *= x.meta.shape[i];
  }
  LOOM_ASSIGN_OR_RETURN(Val w, NormVector(n, scale, norm_shape, count));
  Val bias;
  if (n.HasInput(2)) {
    LOOM_ASSIGN_OR_RETURN(Val bv, n.In(2));
    LOOM_ASSIGN_OR_RETURN(bias, NormVector(n, bv, norm_shape, count));
  } else {
    bias = n.Const(Tensor::Zeros({count}, x.meta.dtype));
  }
  // Over the last axis layernorm takes x as it is; else flattened to [lead, count].
  Val flat = x;
  if (ax != rank - 1) {
    LOOM_ASSIGN_OR_RETURN(flat, Reshape(n, x, {lead, count}));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<Val> r, n.Emit("layernorm", {flat, w, bias}, ir::Attrs{{"eps", eps}}));
  LOOM_ASSIGN_OR_RETURN(Val y, Reshape(n, r[0], ShapeVec(x.meta.shape)));
  LOOM_RETURN_IF_ERROR(n.SetOut(0, y));
  // Mean and InvStdDev: keep-dims shape, in the stash_type dtype (default float).
  std::vector<int64_t> stat_shape = lead_shape;
  stat_shape.resize(rank, 1);
  LOOM_ASSIGN_OR_RETURN(int64_t stash, n.AttrInt("stash_type", 1));
  absl::StatusOr<DType> stash_dt = LoomDType(static_cast<int>(stash));
  if (!stash_dt.ok()) return n.Error(absl::StrCat("attribute 'stash_type': ", stash_dt.status().message()));
  if (!n.WantsOutput(1) && !n.WantsOutput(2)) return absl::OkStatus();
  // layernorm's mean and rstd are saved statistics (its grad rule ignores a
  // gradient arriving at them): outputs the graph uses are recomputed from
  // differentiable ops.
  Val rows = flat;
  if (ax == rank - 1) {
    LOOM_ASSIGN_OR_RETURN(rows, Reshape(n, x, {lead, count}));
  }
  const ir::Attrs last{{"axes", std::vector<int64_t>{-1}}, {"keepdim", true}};
  LOOM_ASSIGN_OR_RETURN(Val mean, n.Emit1("mean", {rows}, last));
  LOOM_ASSIGN_OR_RETURN(Val dev, n.Emit1("sub", {rows, mean}));
  LOOM_ASSIGN_OR_RETURN(Val sq, n.Emit1("mul", {dev, dev}));
  LOOM_ASSIGN_OR_RETURN(Val var, n.Emit1("mean", {sq}, last));
  LOOM_ASSIGN_OR_RETURN(Val var_eps, n.Emit1("add_scalar", {var}, ir::Attrs{{"s", eps}}));
  LOOM_ASSIGN_OR_RETURN(Val rstd, n.Emit1("rsqrt", {var_eps}));
  const Val stats[3] = {Val(), mean, rstd};
  for (int k = 1; k <= 2; ++k) {
    if (!n.WantsOutput(k)) continue;
    LOOM_ASSIGN_OR_RETURN(Val s, Reshape(n, stats[k], stat_shape));
    if (s.meta.dtype != *stash_dt) {
      LOOM_ASSIGN_OR_RETURN(s, n.Emit1("cast", {s}, ir::Attrs{{"dtype", std::string(DTypeName(*stash_dt))}}));
    }
    LOOM_RETURN_IF_ERROR(n.SetOut(k, s));
  }
  return absl::OkStatus();
}

absl::Status Dropout(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"seed", "ratio", "is_test"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  double ratio = 0.5;
  bool training = false;
  if (n.opset() >= 12) {
    if (n.HasInput(1)) {
      LOOM_ASSIGN_OR_RETURN(ratio, n.ConstScalar(1, "ratio"));
    }
    if (n.HasInput(2)) {
      LOOM_ASSIGN_OR_RETURN(double t, n.ConstScalar(2, "training_mode"));
      training = t != 0;
    }
  }
  if (ratio < 0 || ratio >= 1) return n.Error(absl::StrCat("ratio ", ratio, " is outside [0, 1)"));
  if (!training || ratio == 0) {
    LOOM_RETURN_IF_ERROR(n.SetOut(0, x));
    if (!n.WantsOutput(1)) return absl::OkStatus();
    LOOM_ASSIGN_OR_RETURN(
        Val ones,
        n.Emit1("fill", {},
                ir::Attrs{{"shape", ShapeVec(x.meta.shape)}, {"dtype", std::string("bool")}, {"value", 1.0}}));
    return n.SetOut(1, ones);
  }
  LOOM_ASSIGN_OR_RETURN(int64_t seed, n.AttrInt("seed", 0));
  const ir::Attrs attrs{{"p", ratio}, {"seed", seed}};
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("dropout", {x}, attrs));
  LOOM_RETURN_IF_ERROR(n.SetOut(0, y));
  if (!n.WantsOutput(1)) return absl::OkStatus();
  // The mask: dropout regenerates it from (seed, offset, index), so the same
  // dropout of ones is 1 / (1 - p) exactly where x was kept.
  LOOM_ASSIGN_OR_RETURN(Val ones, n.Emit1("ones_like", {x}));
  LOOM_ASSIGN_OR_RETURN(Val kept, n.Emit1("dropout", {ones}, attrs));
  LOOM_ASSIGN_OR_RETURN(Val zero, n.Scalar(0, x.meta.dtype));
  LOOM_ASSIGN_OR_RETURN(Val mask, n.Emit1("greater", {kept, zero}));
  return n.SetOut(1, mask);
}

}  // namespace

std::vector<OpEntry> NnOps() {
  return {
      {"MatMul", "nn", 7, "matmul", MatMul},
      {"Gemm", "nn", 7, "matmul + scale + add", Gemm},
      {"Softmax", "nn", 7, "softmax", [](NodeCtx& n) { return Softmax(n, "softmax"); }},
      {"LogSoftmax", "nn", 7, "log_softmax", [](NodeCtx& n) { return Softmax(n, "log_softmax"); }},
      {"LayerNormalization", "nn", 17, "layernorm", LayerNorm},
      {"Dropout", "nn", 7, "dropout (training) | identity", Dropout},
  };
}

}  // namespace loom::compiler::import::onnx
