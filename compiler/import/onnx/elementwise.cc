// Elementwise ONNX ops: arithmetic (Add Sub Mul Div Pow), unary math (Sqrt
// Reciprocal Neg Erf Exp Log Abs Sin Cos), activations (Relu Tanh Sigmoid),
// comparison, logic and selection (Equal Less Greater LessOrEqual
// GreaterOrEqual And Or Not Where) and Cast.
//
// Arithmetic with a floating scalar constant (one element, rank no higher than
// the other operand's) becomes the registry's scalar ops, which fuse without
// a const input: x + c -> add_scalar, x * c -> scale, x / c -> scale(1 / c),
// x ** c -> pow_scalar. Pow with integer operands, or mixed integer and float
// operands, runs in f64 and casts to the base's dtype (ONNX's result type).
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"
#include "compiler/import/onnx/tensor_proto.h"

namespace loom::compiler::import::onnx {
namespace {

// A floating constant with one element that broadcasts into `other` without
// changing its shape.
bool IsScalarConstFor(const Val& c, const Val& other) {
  return c.is_const() && IsFloating(c.meta.dtype) && c.value.numel() == 1 &&
         c.meta.shape.size() <= other.meta.shape.size() && !other.is_const();
}

absl::Status Binary(NodeCtx& n, const std::string& op) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val a, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val b, n.In(1));
  if (a.meta.dtype != b.meta.dtype)
    return n.Error(absl::StrCat("operands have different dtypes (", DTypeName(a.meta.dtype), " and ",
                                DTypeName(b.meta.dtype), ")"));
  if (IsFloating(a.meta.dtype)) {
    const bool b_scalar = IsScalarConstFor(b, a), a_scalar = IsScalarConstFor(a, b);
    const double cb = b_scalar ? b.value.GetDouble(0) : 0, ca = a_scalar ? a.value.GetDouble(0) : 0;
    Val y;
    if (op == "add" && (b_scalar || a_scalar)) {
      LOOM_ASSIGN_OR_RETURN(y, n.Emit1("add_scalar", {b_scalar ? a : b}, ir::Attrs{{"s", b_scalar ? cb : ca}}));
      return n.SetOut(0, y);
    }
    if (op == "mul" && (b_scalar || a_scalar)) {
      LOOM_ASSIGN_OR_RETURN(y, n.Emit1("scale", {b_scalar ? a : b}, ir::Attrs{{"s", b_scalar ? cb : ca}}));
      return n.SetOut(0, y);
    }
    if (op == "sub" && b_scalar) {
      LOOM_ASSIGN_OR_RETURN(y, n.Emit1("add_scalar", {a}, ir::Attrs{{"s", -cb}}));
      return n.SetOut(0, y);
    }
    if (op == "div" && b_scalar && cb != 0) {
      LOOM_ASSIGN_OR_RETURN(y, n.Emit1("scale", {a}, ir::Attrs{{"s", 1.0 / cb}}));
      return n.SetOut(0, y);
    }
  }
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1(op, {a, b}));
  return n.SetOut(0, y);
}

absl::Status Pow(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val e, n.In(1));
  const DType dt = x.meta.dtype;
  if (IsFloating(dt) && IsScalarConstFor(e, x)) {
    LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("pow_scalar", {x}, ir::Attrs{{"p", e.value.GetDouble(0)}}));
    return n.SetOut(0, y);
  }
  if (IsFloating(dt) && e.meta.dtype == dt) {
    LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("pow", {x, e}));
    return n.SetOut(0, y);
  }
  if (IsFloating(dt)) {  // float base, integer exponent: the exponent in the base's dtype
    LOOM_ASSIGN_OR_RETURN(Val ec, n.Emit1("cast", {e}, ir::Attrs{{"dtype", std::string(DTypeName(dt))}}));
    LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("pow", {x, ec}));
    return n.SetOut(0, y);
  }
  // Integer base: in f64, then back to the base's dtype.
  const ir::Attrs f64{{"dtype", std::string("f64")}};
  LOOM_ASSIGN_OR_RETURN(Val xd, n.Emit1("cast", {x}, f64));
  LOOM_ASSIGN_OR_RETURN(Val ed, n.Emit1("cast", {e}, f64));
  LOOM_ASSIGN_OR_RETURN(Val yd, n.Emit1("pow", {xd, ed}));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("cast", {yd}, ir::Attrs{{"dtype", std::string(DTypeName(dt))}}));
  return n.SetOut(0, y);
}

absl::Status Unary(NodeCtx& n, const std::string& op) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1(op, {x}));
  return n.SetOut(0, y);
}

absl::Status Reciprocal(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_RETURN_IF_ERROR(n.Check(IsFloating(x.meta.dtype), "expected a floating input"));
  LOOM_ASSIGN_OR_RETURN(Val one, n.Scalar(1.0, x.meta.dtype));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("div", {one, x}));
  return n.SetOut(0, y);
}

// A comparison or logical op of two operands of one dtype -> bool.
absl::Status Compare(NodeCtx& n, const std::string& op) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val a, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val b, n.In(1));
  if (a.meta.dtype != b.meta.dtype)
    return n.Error(absl::StrCat("operands have different dtypes (", DTypeName(a.meta.dtype), " and ",
                                DTypeName(b.meta.dtype), ")"));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1(op, {a, b}));
  return n.SetOut(0, y);
}

absl::Status Not(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_RETURN_IF_ERROR(n.Check(x.meta.dtype == DType::kBool, "expected a bool input"));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("logical_not", {x}));
  return n.SetOut(0, y);
}

absl::Status Where(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({}));
  LOOM_ASSIGN_OR_RETURN(Val c, n.In(0));
  LOOM_ASSIGN_OR_RETURN(Val a, n.In(1));
  LOOM_ASSIGN_OR_RETURN(Val b, n.In(2));
  LOOM_RETURN_IF_ERROR(n.Check(c.meta.dtype == DType::kBool, "condition must be bool"));
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("where", {c, a, b}));
  return n.SetOut(0, y);
}

absl::Status Cast(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"to", "saturate"}));
  LOOM_ASSIGN_OR_RETURN(Val x, n.In(0));
  LOOM_RETURN_IF_ERROR(n.Check(n.HasAttr("to"), "attribute 'to' is required"));
  LOOM_ASSIGN_OR_RETURN(int64_t to, n.AttrInt("to", 0));
  absl::StatusOr<DType> dt = LoomDType(static_cast<int>(to));
  if (!dt.ok()) return n.Error(absl::StrCat("attribute 'to': ", dt.status().message()));
  if (*dt == x.meta.dtype) return n.SetOut(0, x);
  LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("cast", {x}, ir::Attrs{{"dtype", std::string(DTypeName(*dt))}}));
  return n.SetOut(0, y);
}

}  // namespace

std::vector<OpEntry> ElementwiseOps() {
  auto binary = [](std::string op) -> ConvertFn { return [op](NodeCtx& n) { return Binary(n, op); }; };
  auto compare = [](std::string op) -> ConvertFn { return [op](NodeCtx& n) { return Compare(n, op); }; };
  auto unary = [](const char* onnx, std::string op, int since) {
    return OpEntry{onnx, "elementwise", since, op, [op](NodeCtx& n) { return Unary(n, op); }};
  };
  return {
      {"Add", "elementwise", 7, "add | add_scalar", binary("add")},
      {"Sub", "elementwise", 7, "sub | add_scalar", binary("sub")},
      {"Mul", "elementwise", 7, "mul | scale", binary("mul")},
      {"Div", "elementwise", 7, "div | scale", binary("div")},
      {"Pow", "elementwise", 7, "pow | pow_scalar (+ cast)", Pow},
      {"Reciprocal", "elementwise", 7, "div", Reciprocal},
      {"Equal", "elementwise", 7, "equal", compare("equal")},
      {"Less", "elementwise", 7, "less", compare("less")},
      {"Greater", "elementwise", 7, "greater", compare("greater")},
      {"LessOrEqual", "elementwise", 12, "less_equal", compare("less_equal")},
      {"GreaterOrEqual", "elementwise", 12, "greater_equal", compare("greater_equal")},
      {"And", "elementwise", 7, "logical_and", compare("logical_and")},
      {"Or", "elementwise", 7, "logical_or", compare("logical_or")},
      {"Not", "elementwise", 7, "logical_not", Not},
      {"Where", "elementwise", 9, "where", Where},
      {"Cast", "elementwise", 7, "cast", Cast},
      unary("Sqrt", "sqrt", 7),
      unary("Neg", "neg", 7),
      unary("Erf", "erf", 9),
      unary("Exp", "exp", 7),
      unary("Log", "log", 7),
      unary("Sin", "sin", 7),
      unary("Cos", "cos", 7),
      unary("Relu", "relu", 7),
      unary("Tanh", "tanh", 7),
      unary("Sigmoid", "sigmoid", 7),
  };
}

}  // namespace loom::compiler::import::onnx
