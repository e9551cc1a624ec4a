// Constant-producing ONNX ops: Constant, ConstantOfShape and Range. Their
// results are always constants at import time (Range and ConstantOfShape need
// constant operands: their output shapes depend on the values).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"
#include "compiler/import/onnx/tensor_proto.h"

namespace loom::compiler::import::onnx {
namespace {

absl::Status ConstantOp(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.Check(n.node().attribute_size() == 1, "expects exactly one value attribute"));
  const ::onnx::AttributeProto& a = n.node().attribute(0);
  const std::string& k = a.name();
  Tensor t;
  if (k == "value") {
    if (a.type() != ::onnx::AttributeProto::TENSOR) return n.Error("attribute 'value' must be a tensor");
    auto r = FromTensorProto(a.t(), n.builder().read_options(), "attribute 'value'");
    if (!r.ok()) return n.Error(r.status().message());
    t = *r;
  } else if (k == "value_float" && a.type() == ::onnx::AttributeProto::FLOAT) {
    t = Tensor::FromVector({}, {static_cast<double>(a.f())}, DType::kF32);
  } else if (k == "value_floats" && a.type() == ::onnx::AttributeProto::FLOATS) {
    t = Tensor::MustEmpty({a.floats_size()}, DType::kF32);
    for (int i = 0; i < a.floats_size(); ++i) t.data<float>()[i] = a.floats(i);
  } else if (k == "value_int" && a.type() == ::onnx::AttributeProto::INT) {
    t = IntTensor({a.i()}, {}, DType::kI64);
  } else if (k == "value_ints" && a.type() == ::onnx::AttributeProto::INTS) {
    t = IntTensor(std::vector<int64_t>(a.ints().begin(), a.ints().end()), {a.ints_size()}, DType::kI64);
  } else {
    return n.Error(absl::StrCat("attribute '", k, "' is not supported (string and sparse constants have no Loom dtype)"));
  }
  return n.SetOut(0, n.Const(t));
}

absl::Status ConstantOfShape(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"value"}));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, n.ConstInts(0, "the shape"));
  DType dt = DType::kF32;
  double value = 0;
  if (const auto* a = n.Attr("value")) {
    if (a->type() != ::onnx::AttributeProto::TENSOR) return n.Error("attribute 'value' must be a tensor");
    auto t = FromTensorProto(a->t(), n.builder().read_options(), "attribute 'value'");
    if (!t.ok()) return n.Error(t.status().message());
    if (t->numel() != 1) return n.Error("attribute 'value' must hold one element");
    dt = t->dtype();
    value = t->GetDouble(0);
  }
  auto numel = CheckedNumel(shape, n.builder().limits().max_elements, "the shape");
  if (!numel.ok()) return n.Error(numel.status().message());
  LOOM_ASSIGN_OR_RETURN(
      Val y, n.Emit1("fill", {}, ir::Attrs{{"shape", shape}, {"dtype", std::string(DTypeName(dt))}, {"value", value}}));
  return n.SetOut(0, y);
}

absl::Status Range(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Tensor st, n.ConstIn(0, "start"));
  LOOM_ASSIGN_OR_RETURN(Tensor li, n.ConstIn(1, "limit"));
  LOOM_ASSIGN_OR_RETURN(Tensor de, n.ConstIn(2, "delta"));
  const DType dt = st.dtype();
  if (li.dtype() != dt || de.dtype() != dt) return n.Error("start, limit and delta must share a dtype");
  if (st.numel() != 1 || li.numel() != 1 || de.numel() != 1) return n.Error("start, limit and delta must be scalars");
  int64_t count = 0;
  if (IsFloating(dt)) {
    const double s = st.GetDouble(0), l = li.GetDouble(0), d = de.GetDouble(0);
    if (d == 0) return n.Error("delta is 0");
    count = static_cast<int64_t>(std::max(std::ceil((l - s) / d), 0.0));
  } else {
    const int64_t s = ToInts(st)[0], l = ToInts(li)[0], d = ToInts(de)[0];
    if (d == 0) return n.Error("delta is 0");
    const int64_t span = l - s;
    count = std::max<int64_t>((span / d) + ((span % d != 0 && ((span > 0) == (d > 0))) ? 1 : 0), 0);
  }
  auto ok = CheckedNumel({count}, n.builder().limits().max_elements, "the range");
  if (!ok.ok()) return n.Error(ok.status().message());
  Tensor out = Tensor::MustEmpty({count}, dt);
  if (IsFloating(dt)) {
    const double s = st.GetDouble(0), d = de.GetDouble(0);
    for (int64_t i = 0; i < count; ++i) out.SetDouble(i, s + static_cast<double>(i) * d);
  } else {
    const int64_t s = ToInts(st)[0], d = ToInts(de)[0];
    std::vector<int64_t> v(count);
    for (int64_t i = 0; i < count; ++i) v[i] = s + i * d;
    out = IntTensor(v, {count}, dt);
  }
  return n.SetOut(0, n.Const(out));
}

}  // namespace

std::vector<OpEntry> ConstantOps() {
  return {
      {"Constant", "constant", 7, "constant", ConstantOp},
      {"ConstantOfShape", "constant", 9, "fill (folded)", ConstantOfShape},
      {"Range", "constant", 11, "constant", Range},
  };
}

}  // namespace loom::compiler::import::onnx
