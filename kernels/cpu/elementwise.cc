#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"

namespace loom::kernels::cpu {

absl::string_view OpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "add";
    case BinaryOp::kSub: return "sub";
    case BinaryOp::kMul: return "mul";
    case BinaryOp::kDiv: return "div";
    case BinaryOp::kMaximum: return "maximum";
    case BinaryOp::kMinimum: return "minimum";
    case BinaryOp::kPow: return "pow";
    case BinaryOp::kReluBackward: return "relu_backward";
  }
  return "?";
}

absl::string_view OpName(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg: return "neg";
    case UnaryOp::kExp: return "exp";
    case UnaryOp::kLog: return "log";
    case UnaryOp::kSqrt: return "sqrt";
    case UnaryOp::kRsqrt: return "rsqrt";
    case UnaryOp::kTanh: return "tanh";
    case UnaryOp::kSigmoid: return "sigmoid";
    case UnaryOp::kRelu: return "relu";
    case UnaryOp::kAbs: return "abs";
    case UnaryOp::kScale: return "scale";
    case UnaryOp::kAddScalar: return "add_scalar";
    case UnaryOp::kPowScalar: return "pow_scalar";
    case UnaryOp::kErf: return "erf";
    case UnaryOp::kSin: return "sin";
    case UnaryOp::kCos: return "cos";
    case UnaryOp::kReciprocal: return "reciprocal";
  }
  return "?";
}

bool TakesIntegers(BinaryOp op) { return op != BinaryOp::kPow && op != BinaryOp::kReluBackward; }
bool TakesIntegers(UnaryOp op) { return op == UnaryOp::kNeg || op == UnaryOp::kAbs; }

absl::string_view ArgName(BinaryOp op, int i) {
  if (op == BinaryOp::kReluBackward) return i == 0 ? "dy" : "x";
  return i == 0 ? "a" : "b";
}

namespace {

// ---- Scalar definitions, shared by kernels (C = float or double) and references.
template <typename C>
C ApplyBinary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMaximum: return (a > b || a != a) ? a : b;  // NaN propagates
    case BinaryOp::kMinimum: return (a < b || a != a) ? a : b;  // NaN propagates
    case BinaryOp::kPow: return std::pow(a, b);
    case BinaryOp::kReluBackward: return b > 0 ? a : C(0);
  }
  return a;
}

// Integer arithmetic (I = int32_t or int64_t) wraps through the unsigned type;
// a zero divisor is rejected before any loop runs.
template <typename I>
I ApplyIntBinary(BinaryOp op, I a, I b) {
  using U = std::make_unsigned_t<I>;
  switch (op) {
    case BinaryOp::kAdd: return static_cast<I>(U(a) + U(b));
    case BinaryOp::kSub: return static_cast<I>(U(a) - U(b));
    case BinaryOp::kMul: return static_cast<I>(U(a) * U(b));
    case BinaryOp::kDiv: return b == -1 ? static_cast<I>(U(0) - U(a)) : a / b;  // truncates toward zero
    case BinaryOp::kMaximum: return a > b ? a : b;
    case BinaryOp::kMinimum: return a < b ? a : b;
    default: return a;
  }
}

template <typename I>
I ApplyIntUnary(UnaryOp op, I x) {
  using U = std::make_unsigned_t<I>;
  const I neg = static_cast<I>(U(0) - U(x));
  return op == UnaryOp::kAbs ? (x < 0 ? neg : x) : neg;
}

template <typename C>
C ApplyUnary(UnaryOp op, C x, C p) {
  switch (op) {
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kExp: return std::exp(x);
    case UnaryOp::kLog: return std::log(x);
    case UnaryOp::kSqrt: return std::sqrt(x);
    case UnaryOp::kRsqrt: return C(1) / std::sqrt(x);
    case UnaryOp::kTanh: return std::tanh(x);
    case UnaryOp::kSigmoid: return C(1) / (C(1) + std::exp(-x));
    case UnaryOp::kRelu: return x < 0 ? C(0) : x;  // NaN propagates
    case UnaryOp::kAbs: return std::abs(x);
    case UnaryOp::kScale: return p * x;
    case UnaryOp::kAddScalar: return x + p;
    case UnaryOp::kPowScalar: return std::pow(x, p);
    case UnaryOp::kErf: return std::erf(x);
    case UnaryOp::kSin: return std::sin(x);
    case UnaryOp::kCos: return std::cos(x);
    case UnaryOp::kReciprocal: return C(1) / x;
  }
  return x;
}

// The position of the first zero in b (as a row-major index), or -1.
int64_t FirstZero(const Tensor& b) {
  const Tensor c = b.Contiguous();
  return VisitDType(c.dtype(), [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      const T* p = static_cast<const T*>(c.raw_data());
      for (int64_t i = 0; i < c.numel(); ++i)
        if (p[i] == 0) return i;
    }
    return -1;
  });
}

absl::Status CheckDivisor(BinaryOp op, const Tensor& b) {
  if (op != BinaryOp::kDiv || !IsInteger(b.dtype())) return absl::OkStatus();
  const int64_t z = FirstZero(b);
  if (z < 0) return absl::OkStatus();
  return ArgError(OpName(op), "b", absl::StrCat("integer division by zero (element ", z, " of b ",
                                               ShapeToString(b.shape()), ")"));
}

absl::Status ValidateBinary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  absl::string_view n = OpName(op);
  LOOM_RETURN_IF_ERROR(CheckCpu(n, ArgName(op, 0), a));
  LOOM_RETURN_IF_ERROR(CheckCpu(n, ArgName(op, 1), b));
  LOOM_ASSIGN_OR_RETURN(kernels::TensorMeta m, InferBinary(op, kernels::MetaOf(a), kernels::MetaOf(b)));
  return CheckOutput(n, "out", out, m.dtype, m.shape);
}

absl::Status ValidateUnary(UnaryOp op, const Tensor& x, const Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu(OpName(op), "x", x));
  LOOM_ASSIGN_OR_RETURN(kernels::TensorMeta m, InferUnary(op, kernels::MetaOf(x)));
  return CheckOutput(OpName(op), "out", out, m.dtype, m.shape);
}

// Compute type: double for f64, the type itself for i32/i64, float otherwise.
template <typename T>
using ComputeT = std::conditional_t<std::is_same_v<T, double> || std::is_integral_v<T>, T, float>;

template <typename T, typename F>
void BinaryLoop(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  using C = ComputeT<T>;
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  StridedLoop loop = MakeLoop(out.shape(), {ContiguousStrides(out.shape()), BroadcastStrides(a, out.shape()),
                                            BroadcastStrides(b, out.shape())});
  ForRows(loop, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = po + off[0];
    const T* x = pa + off[1];
    const T* y = pb + off[2];
    if (in[1] == 1 && in[2] == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = T(f(C(x[j]), C(y[j])));
    } else if (in[1] == 0 && in[2] == 1) {
      const C xv = C(x[0]);
      for (int64_t j = 0; j < n; ++j) o[j] = T(f(xv, C(y[j])));
    } else if (in[1] == 1 && in[2] == 0) {
      const C yv = C(y[0]);
      for (int64_t j = 0; j < n; ++j) o[j] = T(f(C(x[j]), yv));
    } else {
      const int64_t sx = in[1], sy = in[2];
      for (int64_t j = 0; j < n; ++j) o[j] = T(f(C(x[j * sx]), C(y[j * sy])));
    }
  });
}

template <typename T, typename F>
void UnaryLoop(const Tensor& x, Tensor& out, F f) {
  using C = ComputeT<T>;
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  StridedLoop loop = MakeLoop(out.shape(), {ContiguousStrides(out.shape()), x.strides()});
  ForRows(loop, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = po + off[0];
    const T* s = px + off[1];
    if (in[1] == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = T(f(C(s[j])));
    } else {
      const int64_t st = in[1];
      for (int64_t j = 0; j < n; ++j) o[j] = T(f(C(s[j * st])));
    }
  });
}

// The Run* functions dispatch the op outside the inner loop so each loop body
// is a fixed expression the compiler can vectorise.

// Integer ops, I = int32_t or int64_t (TakesIntegers ops only).
template <typename I>
void RunIntBinary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (op) {
#define LOOM_INT_CASE(OP) \
  case OP: BinaryLoop<I>(a, b, out, [](I x, I y) { return ApplyIntBinary<I>(OP, x, y); }); break;
    LOOM_INT_CASE(BinaryOp::kAdd)
    LOOM_INT_CASE(BinaryOp::kSub)
    LOOM_INT_CASE(BinaryOp::kMul)
    LOOM_INT_CASE(BinaryOp::kDiv)
    LOOM_INT_CASE(BinaryOp::kMaximum)
    LOOM_INT_CASE(BinaryOp::kMinimum)
#undef LOOM_INT_CASE
    default: break;
  }
}

template <typename I>
void RunIntUnary(UnaryOp op, const Tensor& x, Tensor& out) {
  if (op == UnaryOp::kAbs) UnaryLoop<I>(x, out, [](I v) { return ApplyIntUnary<I>(UnaryOp::kAbs, v); });
  else UnaryLoop<I>(x, out, [](I v) { return ApplyIntUnary<I>(UnaryOp::kNeg, v); });
}

template <typename T>
void RunBinary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  using C = ComputeT<T>;
  switch (op) {
#define LOOM_BIN_CASE(OP) \
  case OP: BinaryLoop<T>(a, b, out, [](C x, C y) { return ApplyBinary<C>(OP, x, y); }); break;
    LOOM_BIN_CASE(BinaryOp::kAdd)
    LOOM_BIN_CASE(BinaryOp::kSub)
    LOOM_BIN_CASE(BinaryOp::kMul)
    LOOM_BIN_CASE(BinaryOp::kDiv)
    LOOM_BIN_CASE(BinaryOp::kMaximum)
    LOOM_BIN_CASE(BinaryOp::kMinimum)
    LOOM_BIN_CASE(BinaryOp::kPow)
    LOOM_BIN_CASE(BinaryOp::kReluBackward)
#undef LOOM_BIN_CASE
  }
}

template <typename T>
void RunUnary(UnaryOp op, const Tensor& x, double param, Tensor& out) {
  using C = ComputeT<T>;
  const C p = static_cast<C>(param);
  if (op == UnaryOp::kPowScalar) {
    // Common exponents avoid std::pow.
    if (param == 2) return UnaryLoop<T>(x, out, [](C v) { return v * v; });
    if (param == 3) return UnaryLoop<T>(x, out, [](C v) { return v * v * v; });
    if (param == 1) return UnaryLoop<T>(x, out, [](C v) { return v; });
    if (param == 0.5) return UnaryLoop<T>(x, out, [](C v) { return std::sqrt(v); });
    if (param == -1) return UnaryLoop<T>(x, out, [](C v) { return C(1) / v; });
  }
  switch (op) {
#define LOOM_UN_CASE(OP) \
  case OP: UnaryLoop<T>(x, out, [p](C v) { return ApplyUnary<C>(OP, v, p); }); break;
    LOOM_UN_CASE(UnaryOp::kNeg)
    LOOM_UN_CASE(UnaryOp::kExp)
    LOOM_UN_CASE(UnaryOp::kLog)
    LOOM_UN_CASE(UnaryOp::kSqrt)
    LOOM_UN_CASE(UnaryOp::kRsqrt)
    LOOM_UN_CASE(UnaryOp::kTanh)
    LOOM_UN_CASE(UnaryOp::kSigmoid)
    LOOM_UN_CASE(UnaryOp::kRelu)
    LOOM_UN_CASE(UnaryOp::kAbs)
    LOOM_UN_CASE(UnaryOp::kScale)
    LOOM_UN_CASE(UnaryOp::kAddScalar)
    LOOM_UN_CASE(UnaryOp::kPowScalar)
    LOOM_UN_CASE(UnaryOp::kErf)
    LOOM_UN_CASE(UnaryOp::kSin)
    LOOM_UN_CASE(UnaryOp::kCos)
    LOOM_UN_CASE(UnaryOp::kReciprocal)
#undef LOOM_UN_CASE
  }
}

absl::Status CheckOperandDType(absl::string_view op, absl::string_view arg, DType t, bool ints) {
  if (IsFloating(t) || (ints && IsInteger(t))) return absl::OkStatus();
  if (!ints) return CheckFloating(op, arg, t);
  return ArgError(op, arg, absl::StrCat("expected a floating, i32 or i64 dtype, got ", DTypeName(t)));
}

}  // namespace

absl::StatusOr<kernels::TensorMeta> InferBinary(BinaryOp op, const kernels::TensorMeta& a,
                                                const kernels::TensorMeta& b) {
  absl::string_view n = OpName(op), an = ArgName(op, 0), bn = ArgName(op, 1);
  LOOM_RETURN_IF_ERROR(CheckOperandDType(n, an, a.dtype, TakesIntegers(op)));
  LOOM_RETURN_IF_ERROR(CheckOperandDType(n, bn, b.dtype, TakesIntegers(op)));
  LOOM_RETURN_IF_ERROR(CheckSameDType(n, an, a.dtype, bn, b.dtype));
  LOOM_ASSIGN_OR_RETURN(Shape s, BroadcastShapes(n, an, a.shape, bn, b.shape));
  return kernels::TensorMeta{a.dtype, s};
}

absl::StatusOr<kernels::TensorMeta> InferUnary(UnaryOp op, const kernels::TensorMeta& x) {
  LOOM_RETURN_IF_ERROR(CheckOperandDType(OpName(op), "x", x.dtype, TakesIntegers(op)));
  return x;
}

absl::Status BinaryKernel(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateBinary(op, a, b, out));
  LOOM_RETURN_IF_ERROR(CheckDType(OpName(op), ArgName(op, 0), a.dtype(), kElementwiseDTypes));
  LOOM_RETURN_IF_ERROR(CheckDivisor(op, b));
  switch (a.dtype()) {
    case DType::kF64: RunBinary<double>(op, a, b, out); break;
    case DType::kBF16: RunBinary<BF16>(op, a, b, out); break;
    case DType::kI32: RunIntBinary<int32_t>(op, a, b, out); break;
    case DType::kI64: RunIntBinary<int64_t>(op, a, b, out); break;
    default: RunBinary<float>(op, a, b, out); break;
  }
  return absl::OkStatus();
}

absl::Status BinaryReference(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateBinary(op, a, b, out));
  LOOM_RETURN_IF_ERROR(CheckDivisor(op, b));
  LOOM_ASSIGN_OR_RETURN(Tensor ae, a.Expand(out.shape()));
  LOOM_ASSIGN_OR_RETURN(Tensor be, b.Expand(out.shape()));
  if (IsInteger(out.dtype())) {
    // In int64; SetInt wraps the result into i32.
    for (int64_t i = 0; i < out.numel(); ++i)
      SetInt(out, i, ApplyIntBinary<int64_t>(op, GetInt(ae, i), GetInt(be, i)));
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < out.numel(); ++i)
    out.SetDouble(i, ApplyBinary<double>(op, ae.GetDouble(i), be.GetDouble(i)));
  return absl::OkStatus();
}

absl::Status UnaryKernel(UnaryOp op, const Tensor& x, double param, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateUnary(op, x, out));
  LOOM_RETURN_IF_ERROR(CheckDType(OpName(op), "x", x.dtype(), kElementwiseDTypes));
  switch (x.dtype()) {
    case DType::kF64: RunUnary<double>(op, x, param, out); break;
    case DType::kBF16: RunUnary<BF16>(op, x, param, out); break;
    case DType::kI32: RunIntUnary<int32_t>(op, x, out); break;
    case DType::kI64: RunIntUnary<int64_t>(op, x, out); break;
    default: RunUnary<float>(op, x, param, out); break;
  }
  return absl::OkStatus();
}

absl::Status UnaryReference(UnaryOp op, const Tensor& x, double param, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateUnary(op, x, out));
  if (IsInteger(out.dtype())) {
    for (int64_t i = 0; i < out.numel(); ++i) SetInt(out, i, ApplyIntUnary<int64_t>(op, GetInt(x, i)));
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < out.numel(); ++i) out.SetDouble(i, ApplyUnary<double>(op, x.GetDouble(i), param));
  return absl::OkStatus();
}

}  // namespace loom::kernels::cpu
