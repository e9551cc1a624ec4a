// Registers the elementwise ops (kernels in elementwise.h):
//   binary, broadcasting: add, sub, mul, div, maximum, minimum, pow,
//          relu_backward(dy, x)
//   unary: neg, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, abs, erf, sin,
//          cos, reciprocal, scale (attr s), add_scalar (attr s),
//          pow_scalar (attr p)
// add, sub, mul, div, maximum, minimum, neg and abs also take i32/i64.
//
// Gradients are written with other registered ops; for broadcasting ops each
// input gradient is sum_to'd back to the input's shape. relu_backward is the
// mask op behind relu, abs, maximum and minimum: dy where x > 0, else 0 (ties
// of maximum and minimum send the gradient to b). pow(a, b) = c follows
// PyTorch: da = dy * b * a^(b-1), 0 where b == 0; db = dy * c * ln a, 0 where
// a == 0 and b >= 0. For a < 0, ln a is NaN and so is db (a real power of a
// negative base has no derivative in b); a == 0 with b < 0 gives -inf.
#include "absl/strings/str_cat.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/op_util.h"

namespace loom::kernels::cpu::internal {
namespace {

constexpr V kNone = GradBuilder::kNone;

// ---- Binary ------------------------------------------------------------------------

// pow(a, b) = c: full-shape gradients with PyTorch's masks (see the top).
absl::StatusOr<std::pair<V, V>> PowGrads(GradBuilder& b, V A, V B, V C, V g) {
  LOOM_ASSIGN_OR_RETURN(V zeros, b.Emit1("zeros_like", {g}));
  LOOM_ASSIGN_OR_RETURN(V zb, b.Emit1("zeros_like", {B}));
  // da = where(b == 0, 0, g * b * a^(b-1))
  LOOM_ASSIGN_OR_RETURN(V bm1, b.Emit1("add_scalar", {B}, Attrs{{"s", -1.0}}));
  LOOM_ASSIGN_OR_RETURN(V p, b.Emit1("pow", {A, bm1}));
  LOOM_ASSIGN_OR_RETURN(V bp, b.Emit1("mul", {B, p}));
  LOOM_ASSIGN_OR_RETURN(V da, b.Emit1("mul", {g, bp}));
  LOOM_ASSIGN_OR_RETURN(V b_zero, b.Emit1("equal", {B, zb}));
  LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("where", {b_zero, zeros, da}));
  // db = where(a == 0 && b >= 0, 0, g * c * ln a)
  LOOM_ASSIGN_OR_RETURN(V la, b.Emit1("log", {A}));
  LOOM_ASSIGN_OR_RETURN(V cl, b.Emit1("mul", {C, la}));
  LOOM_ASSIGN_OR_RETURN(V db, b.Emit1("mul", {g, cl}));
  LOOM_ASSIGN_OR_RETURN(V za, b.Emit1("zeros_like", {A}));
  LOOM_ASSIGN_OR_RETURN(V a_zero, b.Emit1("equal", {A, za}));
  LOOM_ASSIGN_OR_RETURN(V b_nonneg, b.Emit1("greater_equal", {B, zb}));
  LOOM_ASSIGN_OR_RETURN(V mask, b.Emit1("logical_and", {a_zero, b_nonneg}));
  LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("where", {mask, zeros, db}));
  return std::make_pair(ga, gb);
}

// Full-shape (broadcast) gradients of both inputs, before sum_to.
absl::StatusOr<std::pair<V, V>> BinaryGrads(BinaryOp op, GradBuilder& b, const GradContext& ctx) {
  const V A = ctx.inputs[0], B = ctx.inputs[1], C = ctx.outputs[0], g = ctx.grad_outputs[0];
  switch (op) {
    case BinaryOp::kAdd: return std::make_pair(g, g);
    case BinaryOp::kSub: {
      LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("neg", {g}));
      return std::make_pair(g, gb);
    }
    case BinaryOp::kMul: {
      LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("mul", {g, B}));
      LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("mul", {g, A}));
      return std::make_pair(ga, gb);
    }
    case BinaryOp::kDiv: {
      // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -c/b.
      LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("div", {g, B}));
      LOOM_ASSIGN_OR_RETURN(V cb, b.Emit1("div", {C, B}));
      LOOM_ASSIGN_OR_RETURN(V gcb, b.Emit1("mul", {g, cb}));
      LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("neg", {gcb}));
      return std::make_pair(ga, gb);
    }
    case BinaryOp::kMaximum: {
      // a wins where a - b > 0.
      LOOM_ASSIGN_OR_RETURN(V diff, b.Emit1("sub", {A, B}));
      LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("relu_backward", {g, diff}));
      LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("sub", {g, ga}));
      return std::make_pair(ga, gb);
    }
    case BinaryOp::kMinimum: {
      // a wins where b - a > 0.
      LOOM_ASSIGN_OR_RETURN(V diff, b.Emit1("sub", {B, A}));
      LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("relu_backward", {g, diff}));
      LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("sub", {g, ga}));
      return std::make_pair(ga, gb);
    }
    case BinaryOp::kPow: return PowGrads(b, A, B, C, g);
    case BinaryOp::kReluBackward: {
      // Linear in dy with the same mask; piecewise constant in x.
      LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("relu_backward", {g, B}));
      LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("zeros_like", {B}));
      return std::make_pair(ga, gb);
    }
  }
  return absl::InternalError("unknown binary op");
}

// i64 and i32 cases; div's divisors are nonzero and of both signs, so the
// truncation toward zero is exercised.
void AddIntegerCases(BinaryOp op, OpDef& def) {
  kernels::InputSpec b64 = TypedSpec({5, 1}, DType::kI64, -50, 50), b32 = TypedSpec({7}, DType::kI32, -50, 50);
  if (op == BinaryOp::kDiv) {
    for (kernels::InputSpec* s : {&b64, &b32}) {
      s->fill = [](Tensor& t, const Philox& rng) {
        for (int64_t e = 0; e < t.numel(); ++e) {
          const int64_t v = static_cast<int64_t>(rng.Uniform(e) * 18) - 9;  // [-9, 8]
          t.SetDouble(e, static_cast<double>(v >= 0 ? v + 1 : v));
        }
      };
    }
  }
  def.cases.push_back(Case("i64_bcast", {TypedSpec({3, 5, 7}, DType::kI64, -1000, 1000), b64}));
  def.cases.push_back(Case("i32_bcast", {TypedSpec({4, 7}, DType::kI32, -1000, 1000), b32}));
}

OpDef MakeBinary(BinaryOp op, std::string doc) {
  OpDef def;
  def.name = std::string(OpName(op));
  def.doc = std::move(doc);
  def.num_inputs = 2;
  def.elementwise = true;
  def.infer = [op](absl::Span<const TensorMeta> in, const Attrs&) -> InferResult {
    LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferBinary(op, in[0], in[1]));
    return std::vector<TensorMeta>{m};
  };
  def.kernels[DeviceKind::kCPU] = [op](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
    return BinaryKernel(op, in[0], in[1], out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [op](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
    return BinaryReference(op, in[0], in[1], out[0]);
  };
  def.grad = [op](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone, kNone};
    LOOM_ASSIGN_OR_RETURN(auto full, BinaryGrads(op, b, ctx));
    LOOM_ASSIGN_OR_RETURN(V ga, SumToShape(b, full.first, b.Meta(ctx.inputs[0]).shape));
    LOOM_ASSIGN_OR_RETURN(V gb, SumToShape(b, full.second, b.Meta(ctx.inputs[1]).shape));
    return std::vector<V>{ga, gb};
  };
  // b's range: away from 0 for div; pow's base is positive (d/db needs ln a).
  const double lo = op == BinaryOp::kDiv ? 0.5 : -1.0, hi = op == BinaryOp::kDiv ? 2.0 : 1.0;
  const double alo = op == BinaryOp::kPow ? 0.5 : -1.0, ahi = op == BinaryOp::kPow ? 2.0 : 1.0;
  def.cases = {
      Case("same_3x5x7", {Spec({3, 5, 7}, alo, ahi), Spec({3, 5, 7}, lo, hi)}),
      Case("bcast_row", {Spec({3, 5, 7}, alo, ahi), Spec({5, 1}, lo, hi)}),
      Case("bcast_both", {Spec({3, 1, 7}, alo, ahi), Spec({4, 1}, lo, hi)}),
      Case("scalar_b", {Spec({2, 9}, alo, ahi), Spec({}, lo, hi)}),
  };
  if (op == BinaryOp::kDiv) {
    // The denominator with a mixed sign, broadcast from the left.
    kernels::InputSpec neg_b = Spec({6}, -2.0, -0.5);
    def.cases.push_back(Case("neg_denominator", {Spec({5, 6}), neg_b}));
  }
  if (op == BinaryOp::kPow) {
    // Whole exponents, the form decomposed norms use (x ** 2, x ** 3).
    def.cases.push_back(Case("whole_exponent", {Spec({5, 7}, -2.0, 2.0), WholeSpec({7}, 1, 4)}));
  }
  if (TakesIntegers(op)) AddIntegerCases(op, def);
  return def;
}

// ---- Unary -------------------------------------------------------------------------

// Gradient of x given dy, x and y.
absl::StatusOr<V> UnaryGrad(UnaryOp op, GradBuilder& b, V g, V x, V y, const Attrs& attrs) {
  switch (op) {
    case UnaryOp::kNeg: return b.Emit1("neg", {g});
    case UnaryOp::kExp: return b.Emit1("mul", {g, y});
    case UnaryOp::kLog: return b.Emit1("div", {g, x});
    case UnaryOp::kSqrt: {  // dy / (2 y)
      LOOM_ASSIGN_OR_RETURN(V h, b.Emit1("scale", {g}, Attrs{{"s", 0.5}}));
      return b.Emit1("div", {h, y});
    }
    case UnaryOp::kRsqrt: {  // -0.5 * y / x
      LOOM_ASSIGN_OR_RETURN(V yx, b.Emit1("div", {y, x}));
      LOOM_ASSIGN_OR_RETURN(V gyx, b.Emit1("mul", {g, yx}));
      return b.Emit1("scale", {gyx}, Attrs{{"s", -0.5}});
    }
    case UnaryOp::kTanh: {  // dy * (1 - y^2)
      LOOM_ASSIGN_OR_RETURN(V y2, b.Emit1("mul", {y, y}));
      LOOM_ASSIGN_OR_RETURN(V neg, b.Emit1("scale", {y2}, Attrs{{"s", -1.0}}));
      LOOM_ASSIGN_OR_RETURN(V one_minus, b.Emit1("add_scalar", {neg}, Attrs{{"s", 1.0}}));
      return b.Emit1("mul", {g, one_minus});
    }
    case UnaryOp::kSigmoid: {  // dy * y * (1 - y)
      LOOM_ASSIGN_OR_RETURN(V neg, b.Emit1("scale", {y}, Attrs{{"s", -1.0}}));
      LOOM_ASSIGN_OR_RETURN(V one_minus, b.Emit1("add_scalar", {neg}, Attrs{{"s", 1.0}}));
      LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("mul", {y, one_minus}));
      return b.Emit1("mul", {g, d});
    }
    case UnaryOp::kRelu: return b.Emit1("relu_backward", {g, x});
    case UnaryOp::kAbs: {  // dy * [x > 0] - dy * [x < 0]
      LOOM_ASSIGN_OR_RETURN(V pos, b.Emit1("relu_backward", {g, x}));
      LOOM_ASSIGN_OR_RETURN(V nx, b.Emit1("neg", {x}));
      LOOM_ASSIGN_OR_RETURN(V negpart, b.Emit1("relu_backward", {g, nx}));
      return b.Emit1("sub", {pos, negpart});
    }
    case UnaryOp::kErf: {  // dy * 2 / sqrt(pi) * exp(-x^2)
      LOOM_ASSIGN_OR_RETURN(V x2, b.Emit1("mul", {x, x}));
      LOOM_ASSIGN_OR_RETURN(V nx2, b.Emit1("scale", {x2}, Attrs{{"s", -1.0}}));
      LOOM_ASSIGN_OR_RETURN(V e, b.Emit1("exp", {nx2}));
      LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("scale", {e}, Attrs{{"s", 1.1283791670955126}}));  // 2 / sqrt(pi)
      return b.Emit1("mul", {g, d});
    }
    case UnaryOp::kSin: {  // dy * cos(x)
      LOOM_ASSIGN_OR_RETURN(V c, b.Emit1("cos", {x}));
      return b.Emit1("mul", {g, c});
    }
    case UnaryOp::kCos: {  // -dy * sin(x)
      LOOM_ASSIGN_OR_RETURN(V sn, b.Emit1("sin", {x}));
      LOOM_ASSIGN_OR_RETURN(V gs, b.Emit1("mul", {g, sn}));
      return b.Emit1("neg", {gs});
    }
    case UnaryOp::kReciprocal: {  // -dy * y^2
      LOOM_ASSIGN_OR_RETURN(V y2, b.Emit1("mul", {y, y}));
      LOOM_ASSIGN_OR_RETURN(V gy2, b.Emit1("mul", {g, y2}));
      return b.Emit1("neg", {gy2});
    }
    case UnaryOp::kScale: return b.Emit1("scale", {g}, Attrs{{"s", attrs.GetFloat("s")}});
    case UnaryOp::kAddScalar: return g;
    case UnaryOp::kPowScalar: {  // dy * p * x^(p-1)
      const double p = attrs.GetFloat("p");
      LOOM_ASSIGN_OR_RETURN(V xp, b.Emit1("pow_scalar", {x}, Attrs{{"p", p - 1}}));
      LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("scale", {xp}, Attrs{{"s", p}}));
      return b.Emit1("mul", {g, d});
    }
  }
  return absl::InternalError("unknown unary op");
}

// The scalar attribute of an op, or "" when it has none.
std::string ParamName(UnaryOp op) {
  switch (op) {
    case UnaryOp::kScale: case UnaryOp::kAddScalar: return "s";
    case UnaryOp::kPowScalar: return "p";
    default: return "";
  }
}

OpDef MakeUnary(UnaryOp op, std::string doc, double lo, double hi, std::vector<Attrs> attr_sets = {Attrs{}}) {
  OpDef def;
  def.name = std::string(OpName(op));
  def.doc = std::move(doc);
  def.num_inputs = 1;
  def.elementwise = true;
  const std::string param = ParamName(op);
  def.infer = [op, param](absl::Span<const TensorMeta> in, const Attrs& attrs) -> InferResult {
    if (!param.empty() && !attrs.Has(param))
      return ArgError(OpName(op), param, "missing attribute (a number)");
    LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferUnary(op, in[0]));
    return std::vector<TensorMeta>{m};
  };
  def.kernels[DeviceKind::kCPU] = [op, param](absl::Span<const Tensor> in, absl::Span<Tensor> out,
                                              const Attrs& attrs) {
    return UnaryKernel(op, in[0], param.empty() ? 0.0 : attrs.GetFloat(param), out[0]);
  };
  def.kernel_dtypes = CpuDTypes({DType::kF32, DType::kF64, DType::kBF16});
  def.reference = [op, param](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) {
    return UnaryReference(op, in[0], param.empty() ? 0.0 : attrs.GetFloat(param), out[0]);
  };
  def.grad = [op](GradBuilder& b, const GradContext& ctx) -> GradResult {
    if (ctx.grad_outputs[0] == kNone) return std::vector<V>{kNone};
    LOOM_ASSIGN_OR_RETURN(V gx, UnaryGrad(op, b, ctx.grad_outputs[0], ctx.inputs[0], ctx.outputs[0], ctx.attrs));
    return std::vector<V>{gx};
  };
  int k = 0;
  for (const Attrs& a : attr_sets) {
    std::string suffix = attr_sets.size() > 1 ? absl::StrCat("_", k++) : "";
    def.cases.push_back(Case("odd_3x5x7" + suffix, {Spec({3, 5, 7}, lo, hi)}, a));
    def.cases.push_back(Case("vec_13" + suffix, {Spec({13}, lo, hi)}, a));
  }
  def.cases.push_back(Case("scalar", {Spec({}, lo, hi)}, attr_sets[0]));
  if (TakesIntegers(op)) {
    def.cases.push_back(Case("i64", {TypedSpec({3, 5, 7}, DType::kI64, -1000, 1000)}));
    def.cases.push_back(Case("i32", {TypedSpec({13}, DType::kI32, -1000, 1000)}));
  }
  return def;
}

LOOM_REGISTER_OP(MakeBinary(BinaryOp::kAdd, "a + b (broadcasting)"));
LOOM_REGISTER_OP(MakeBinary(BinaryOp::kSub, "a - b (broadcasting)"));
LOOM_REGISTER_OP(MakeBinary(BinaryOp::kMul, "a * b (broadcasting)"));
LOOM_REGISTER_OP(MakeBinary(BinaryOp::kDiv, "a / b (broadcasting)"));
LOOM_REGISTER_OP(MakeBinary(BinaryOp::kMaximum, "elementwise max(a, b) (broadcasting; NaN propagates)"));
LOOM_REGISTER_OP(MakeBinary(BinaryOp::kMinimum, "elementwise min(a, b) (broadcasting; NaN propagates)"));
LOOM_REGISTER_OP(MakeBinary(BinaryOp::kPow, "a ** b (broadcasting)"));
OpDef MakeReluBackward() {
  OpDef def = MakeBinary(BinaryOp::kReluBackward, "relu_backward(dy, x) = dy where x > 0, else 0 (broadcasting)");
  for (auto& c : def.cases) {
    c.inputs[1].lo = -1.0;
    c.inputs[1].hi = 1.0;
  }
  return def;
}
LOOM_REGISTER_OP(MakeReluBackward());

LOOM_REGISTER_OP(MakeUnary(UnaryOp::kNeg, "-x", -1, 1));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kExp, "exp(x)", -2, 2));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kLog, "log(x)", 0.5, 2));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kSqrt, "sqrt(x)", 0.5, 2));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kRsqrt, "1 / sqrt(x)", 0.5, 2));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kTanh, "tanh(x)", -2, 2));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kSigmoid, "1 / (1 + exp(-x))", -3, 3));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kRelu, "max(x, 0) (NaN propagates)", -1, 1));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kAbs, "|x|", -1, 1));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kErf, "erf(x)", -2, 2));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kSin, "sin(x)", -3, 3));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kCos, "cos(x)", -3, 3));
OpDef MakeReciprocal() {
  OpDef def = MakeUnary(UnaryOp::kReciprocal, "1 / x", 0.5, 2);
  def.cases.push_back(Case("negative", {Spec({4, 5}, -2, -0.5)}));
  return def;
}
LOOM_REGISTER_OP(MakeReciprocal());
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kScale, "s * x (attr s)", -1, 1, {Attrs{{"s", -1.5}}, Attrs{{"s", 0.25}}}));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kAddScalar, "x + s (attr s)", -1, 1, {Attrs{{"s", 2.5}}}));
LOOM_REGISTER_OP(MakeUnary(UnaryOp::kPowScalar, "x ** p (attr p)", 0.5, 2,
                           {Attrs{{"p", 2.5}}, Attrs{{"p", -0.5}}, Attrs{{"p", 3.0}}}));

}  // namespace
}  // namespace loom::kernels::cpu::internal
