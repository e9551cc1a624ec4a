// The f32 formula of every op the pointwise generator supports (pointwise.h),
// matching the CPU kernels (kernels/cpu/elementwise.cc, kernels/cpu/compare.cc,
// kernels/cpu/nn/activations.cc): same expressions, same float constants, same special cases
// (pow_scalar's exponents 2, 3, 1, 0.5, -1). Math is IEEE f32 (no fast math).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/cuda/codegen/pointwise_internal.h"

namespace loom::kernels::cuda::codegen {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view msg) { return CodegenError(field, msg); }

// Host copies of the CPU kernels' constants (kernels/cpu/nn/activations.cc).
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluC = 0.044715;

absl::StatusOr<bool> GeluIsTanh(const kernels::Attrs& a, const std::string& where) {
  if (a.Has("approximate") && !absl::holds_alternative<std::string>(a.values().at("approximate")))
    return Bad(where, "approximate: expected a string");
  std::string s = a.GetString("approximate", "none");
  if (s == "tanh") return true;
  if (s == "none") return false;
  return Bad(where, absl::StrCat("approximate: expected \"tanh\" or \"none\", got \"", s, "\""));
}

// Value `v` rounded as if stored in dtype t (host side, for constants).
double RoundTo(DType t, double v) {
  switch (t) {
    case DType::kBF16: return static_cast<float>(BF16(static_cast<float>(v)));
    case DType::kF16: return static_cast<float>(F16(static_cast<float>(v)));
    case DType::kI32: case DType::kI64: return std::trunc(v);
    case DType::kBool: return v != 0 ? 1.0 : 0.0;
    default: return v;
  }
}

// Expression rounding float `e` to dtype t and back (a cast node).
std::string RoundExpr(DType t, const std::string& e) {
  switch (t) {
    case DType::kBF16: return absl::StrCat("loom_bf2f(loom_f2bf(", e, "))");
    case DType::kF16: return absl::StrCat("loom_h2f(loom_f2h(", e, "))");
    case DType::kI32: case DType::kI64: return absl::StrCat("truncf(", e, ")");
    case DType::kBool: return absl::StrCat("((", e, ") != 0.0f ? 1.0f : 0.0f)");
    default: return e;  // f32, f64: math is f32
  }
}

// A number attribute (double or integer), or an error naming it.
absl::StatusOr<double> NumberAttr(const kernels::Attrs& a, const std::string& name, const std::string& where) {
  if (!a.Has(name)) return Bad(where, absl::StrCat(name, ": missing attribute (a number)"));
  const kernels::AttrValue& v = a.values().at(name);
  if (!absl::holds_alternative<double>(v) && !absl::holds_alternative<int64_t>(v))
    return Bad(where, absl::StrCat(name, ": expected a number"));
  return a.GetFloat(name);
}

}  // namespace

int OpArity(const std::string& op) {
  static const char* kBinary[] = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "relu_backward",
                                  "gelu_backward", "silu_backward", "equal", "less", "less_equal", "greater",
                                  "greater_equal", "logical_and", "logical_or"};
  static const char* kUnary[] = {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
                                 "relu", "abs", "scale", "add_scalar", "pow_scalar", "gelu",
                                 "silu", "cast", "zeros_like", "ones_like", "broadcast_to",
                                 "erf", "sin", "cos", "reciprocal", "logical_not"};
  for (const char* n : kBinary)
    if (op == n) return 2;
  for (const char* n : kUnary)
    if (op == n) return 1;
  if (op == "where") return 3;
  if (op == "fill") return 0;
  return -1;
}

// Statements computing node `n`'s value into `out` (a float) from input
// variable names `x`.
absl::StatusOr<std::string> NodeExpr(const PwNode& n, const std::vector<std::string>& x,
                                     const std::string& where) {
  const std::string& op = n.op;
  const kernels::Attrs& a = n.attrs;
  auto X = [&](int k) { return x[k]; };
  if (op == "add") return absl::StrCat(X(0), " + ", X(1));
  if (op == "sub") return absl::StrCat(X(0), " - ", X(1));
  if (op == "mul") return absl::StrCat(X(0), " * ", X(1));
  if (op == "div") return absl::StrCat(X(0), " / ", X(1));
  if (op == "maximum")
    return absl::StrCat("(", X(0), " > ", X(1), " || ", X(0), " != ", X(0), ") ? ", X(0), " : ", X(1));
  if (op == "minimum")
    return absl::StrCat("(", X(0), " < ", X(1), " || ", X(0), " != ", X(0), ") ? ", X(0), " : ", X(1));
  if (op == "pow") return absl::StrCat("powf(", X(0), ", ", X(1), ")");
  if (op == "relu_backward") return absl::StrCat(X(1), " > 0.0f ? ", X(0), " : 0.0f");
  // Comparisons and logical ops yield 0 or 1 (stored as bool); bool operands
  // arrive as 0.0f / 1.0f.
  static const std::pair<const char*, const char*> kCompare[] = {
      {"equal", " == "}, {"less", " < "}, {"less_equal", " <= "}, {"greater", " > "}, {"greater_equal", " >= "}};
  for (const auto& [name, rel] : kCompare)
    if (op == name) return absl::StrCat("(", X(0), rel, X(1), ") ? 1.0f : 0.0f");
  if (op == "logical_and") return absl::StrCat("(", X(0), " != 0.0f && ", X(1), " != 0.0f) ? 1.0f : 0.0f");
  if (op == "logical_or") return absl::StrCat("(", X(0), " != 0.0f || ", X(1), " != 0.0f) ? 1.0f : 0.0f");
  if (op == "logical_not") return absl::StrCat(X(0), " != 0.0f ? 0.0f : 1.0f");
  if (op == "where") return absl::StrCat(X(0), " != 0.0f ? ", X(1), " : ", X(2));
  if (op == "erf") return absl::StrCat("erff(", X(0), ")");
  if (op == "sin") return absl::StrCat("sinf(", X(0), ")");
  if (op == "cos") return absl::StrCat("cosf(", X(0), ")");
  if (op == "reciprocal") return absl::StrCat("1.0f / ", X(0));
  if (op == "neg") return absl::StrCat("-", X(0));
  if (op == "exp") return absl::StrCat("expf(", X(0), ")");
  if (op == "log") return absl::StrCat("logf(", X(0), ")");
  if (op == "sqrt") return absl::StrCat("sqrtf(", X(0), ")");
  if (op == "rsqrt") return absl::StrCat("1.0f / sqrtf(", X(0), ")");
  if (op == "tanh") return absl::StrCat("tanhf(", X(0), ")");
  if (op == "sigmoid") return absl::StrCat("1.0f / (1.0f + expf(-", X(0), "))");
  if (op == "relu") return absl::StrCat(X(0), " < 0.0f ? 0.0f : ", X(0));
  if (op == "abs") return absl::StrCat("fabsf(", X(0), ")");
  if (op == "scale") {
    LOOM_ASSIGN_OR_RETURN(double s, NumberAttr(a, "s", where));
    return absl::StrCat(FloatLiteral(s), " * ", X(0));
  }
  if (op == "add_scalar") {
    LOOM_ASSIGN_OR_RETURN(double s, NumberAttr(a, "s", where));
    return absl::StrCat(X(0), " + ", FloatLiteral(s));
  }
  if (op == "pow_scalar") {
    LOOM_ASSIGN_OR_RETURN(double p, NumberAttr(a, "p", where));
    // The CPU kernel's special exponents (kernels/cpu/elementwise.cc).
    if (p == 2) return absl::StrCat(X(0), " * ", X(0));
    if (p == 3) return absl::StrCat(X(0), " * ", X(0), " * ", X(0));
    if (p == 1) return X(0);
    if (p == 0.5) return absl::StrCat("sqrtf(", X(0), ")");
    if (p == -1) return absl::StrCat("1.0f / ", X(0));
    return absl::StrCat("powf(", X(0), ", ", FloatLiteral(p), ")");
  }
  if (op == "gelu") {
    LOOM_ASSIGN_OR_RETURN(bool t, GeluIsTanh(a, where));
    if (t)
      return absl::StrCat("0.5f * ", X(0), " * (1.0f + tanhf(", FloatLiteral(kSqrt2OverPi), " * (", X(0),
                          " + ", FloatLiteral(kGeluC), " * ", X(0), " * ", X(0), " * ", X(0), ")))");
    return absl::StrCat("0.5f * ", X(0), " * (1.0f + erff(", X(0), " * ", FloatLiteral(kInvSqrt2), "))");
  }
  if (op == "gelu_backward") {
    LOOM_ASSIGN_OR_RETURN(bool t, GeluIsTanh(a, where));
    const std::string& dy = X(0);
    const std::string& v = X(1);
    if (t) {
      std::string k = FloatLiteral(kSqrt2OverPi), c = FloatLiteral(kGeluC);
      std::string th = absl::StrCat("tanhf(", k, " * (", v, " + ", c, " * ", v, " * ", v, " * ", v, "))");
      return absl::StrCat("[&] { const float t_ = ", th, "; return ", dy, " * (0.5f * (1.0f + t_) + 0.5f * ",
                          v, " * (1.0f - t_ * t_) * ", k, " * (1.0f + 3.0f * ", c, " * ", v, " * ", v,
                          ")); }()");
    }
    return absl::StrCat(dy, " * (0.5f * (1.0f + erff(", v, " * ", FloatLiteral(kInvSqrt2), ")) + ", v, " * ",
                        FloatLiteral(kInvSqrt2Pi), " * expf(-0.5f * ", v, " * ", v, "))");
  }
  if (op == "silu") return absl::StrCat(X(0), " / (1.0f + expf(-", X(0), "))");
  if (op == "silu_backward")
    return absl::StrCat("[&] { const float s_ = 1.0f / (1.0f + expf(-", X(1), ")); return ", X(0),
                        " * (s_ * (1.0f + ", X(1), " * (1.0f - s_))); }()");
  if (op == "cast") {
    if (!a.Has("dtype")) return Bad(where, "dtype: missing attribute (a dtype name)");
    auto dt = ParseDType(a.GetString("dtype"));
    if (!dt.ok()) return Bad(where, absl::StrCat("dtype: ", dt.status().message()));
    return RoundExpr(*dt, X(0));
  }
  if (op == "broadcast_to") return X(0);  // the operand strides already broadcast
  if (op == "zeros_like") return std::string("0.0f");
  if (op == "ones_like") return std::string("1.0f");
  if (op == "fill") {
    double v = a.GetFloat("value", 0.0);
    auto dt = ParseDType(a.GetString("dtype", "f32"));
    if (!dt.ok()) return Bad(where, absl::StrCat("dtype: ", dt.status().message()));
    return FloatLiteral(RoundTo(*dt, v));
  }
  return Bad(where, absl::StrCat("op '", op, "' is not supported by the CUDA pointwise generator"));
}

}  // namespace loom::kernels::cuda::codegen
