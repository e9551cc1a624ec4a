#include "kernels/cpu/compare.h"

#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"

namespace loom::kernels::cpu {

absl::string_view OpName(CompareOp op) {
  switch (op) {
    case CompareOp::kEqual: return "equal";
    case CompareOp::kLess: return "less";
    case CompareOp::kLessEqual: return "less_equal";
    case CompareOp::kGreater: return "greater";
    case CompareOp::kGreaterEqual: return "greater_equal";
    case CompareOp::kLogicalAnd: return "logical_and";
    case CompareOp::kLogicalOr: return "logical_or";
  }
  return "?";
}

namespace {

bool IsLogical(CompareOp op) { return op == CompareOp::kLogicalAnd || op == CompareOp::kLogicalOr; }

// The scalar definition, shared by kernels (C = float, double, int32_t,
// int64_t, bool) and references (C = double or int64_t).
template <typename C>
bool ApplyCompare(CompareOp op, C a, C b) {
  switch (op) {
    case CompareOp::kEqual: return a == b;
    case CompareOp::kLess: return a < b;
    case CompareOp::kLessEqual: return a <= b;
    case CompareOp::kGreater: return a > b;
    case CompareOp::kGreaterEqual: return a >= b;
    case CompareOp::kLogicalAnd: return a != C(0) && b != C(0);
    case CompareOp::kLogicalOr: return a != C(0) || b != C(0);
  }
  return false;
}

absl::Status CheckOperand(CompareOp op, absl::string_view arg, DType t) {
  const absl::string_view n = OpName(op);
  if (IsLogical(op)) return CheckDType(n, arg, t, {DType::kBool});
  if (IsFloating(t) || IsInteger(t) || (op == CompareOp::kEqual && t == DType::kBool)) return absl::OkStatus();
  return ArgError(n, arg, absl::StrCat("expected a floating, i32 or i64 dtype", op == CompareOp::kEqual ? " or bool" : "",
                                       ", got ", DTypeName(t)));
}

// Compute type of the kernels: float for 16-bit floats, the type itself otherwise.
template <typename T>
using CmpT = std::conditional_t<kIsHalf<T>, float, T>;

template <typename T>
void CompareLoop(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  using C = CmpT<T>;
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  bool* po = static_cast<bool*>(out.raw_data());
  StridedLoop loop = MakeLoop(out.shape(), {ContiguousStrides(out.shape()), BroadcastStrides(a, out.shape()),
                                            BroadcastStrides(b, out.shape())});
  ForRows(loop, [&](const int64_t* off, int64_t n, const int64_t* in) {
    bool* o = po + off[0];
    const T* x = pa + off[1];
    const T* y = pb + off[2];
    const int64_t sx = in[1], sy = in[2];
    switch (op) {
#define LOOM_CMP_CASE(OP) \
  case OP: for (int64_t j = 0; j < n; ++j) o[j] = ApplyCompare<C>(OP, C(x[j * sx]), C(y[j * sy])); break;
      LOOM_CMP_CASE(CompareOp::kEqual)
      LOOM_CMP_CASE(CompareOp::kLess)
      LOOM_CMP_CASE(CompareOp::kLessEqual)
      LOOM_CMP_CASE(CompareOp::kGreater)
      LOOM_CMP_CASE(CompareOp::kGreaterEqual)
      LOOM_CMP_CASE(CompareOp::kLogicalAnd)
      LOOM_CMP_CASE(CompareOp::kLogicalOr)
#undef LOOM_CMP_CASE
    }
  });
}

// o = c ? x : y over elements of `U` (an unsigned type of the element's size).
template <typename U>
void WhereLoop(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  const bool* pc = static_cast<const bool*>(cond.raw_data());
  const U* pa = static_cast<const U*>(a.raw_data());
  const U* pb = static_cast<const U*>(b.raw_data());
  U* po = static_cast<U*>(out.raw_data());
  const auto& s = out.shape();
  StridedLoop loop = MakeLoop(s, {ContiguousStrides(s), BroadcastStrides(cond, s), BroadcastStrides(a, s),
                                  BroadcastStrides(b, s)});
  ForRows(loop, [&](const int64_t* off, int64_t n, const int64_t* in) {
    U* o = po + off[0];
    const bool* c = pc + off[1];
    const U* x = pa + off[2];
    const U* y = pb + off[3];
    const int64_t sc = in[1], sx = in[2], sy = in[3];
    for (int64_t j = 0; j < n; ++j) o[j] = c[j * sc] ? x[j * sx] : y[j * sy];
  });
}

absl::Status ValidateCompare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu(OpName(op), "a", a));
  LOOM_RETURN_IF_ERROR(CheckCpu(OpName(op), "b", b));
  LOOM_ASSIGN_OR_RETURN(kernels::TensorMeta m, InferCompare(op, kernels::MetaOf(a), kernels::MetaOf(b)));
  return CheckOutput(OpName(op), "out", out, m.dtype, m.shape);
}

absl::Status ValidateWhere(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("where", "cond", cond));
  LOOM_RETURN_IF_ERROR(CheckCpu("where", "a", a));
  LOOM_RETURN_IF_ERROR(CheckCpu("where", "b", b));
  LOOM_ASSIGN_OR_RETURN(kernels::TensorMeta m,
                        InferWhere(kernels::MetaOf(cond), kernels::MetaOf(a), kernels::MetaOf(b)));
  return CheckOutput("where", "out", out, m.dtype, m.shape);
}

}  // namespace

absl::StatusOr<kernels::TensorMeta> InferCompare(CompareOp op, const kernels::TensorMeta& a,
                                                 const kernels::TensorMeta& b) {
  const absl::string_view n = OpName(op);
  LOOM_RETURN_IF_ERROR(CheckOperand(op, "a", a.dtype));
  LOOM_RETURN_IF_ERROR(CheckOperand(op, "b", b.dtype));
  LOOM_RETURN_IF_ERROR(CheckSameDType(n, "a", a.dtype, "b", b.dtype));
  LOOM_ASSIGN_OR_RETURN(Shape s, BroadcastShapes(n, "a", a.shape, "b", b.shape));
  return kernels::TensorMeta{DType::kBool, s};
}

absl::Status CompareKernel(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateCompare(op, a, b, out));
  VisitDType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    CompareLoop<T>(op, a, b, out);
  });
  return absl::OkStatus();
}

absl::Status CompareReference(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateCompare(op, a, b, out));
  LOOM_ASSIGN_OR_RETURN(Tensor ae, a.Expand(out.shape()));
  LOOM_ASSIGN_OR_RETURN(Tensor be, b.Expand(out.shape()));
  const bool floating = IsFloating(a.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const bool r = floating ? ApplyCompare<double>(op, ae.GetDouble(i), be.GetDouble(i))
                            : ApplyCompare<int64_t>(op, GetInt(ae, i), GetInt(be, i));
    out.SetDouble(i, r ? 1 : 0);
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::TensorMeta> InferLogicalNot(const kernels::TensorMeta& x) {
  LOOM_RETURN_IF_ERROR(CheckDType("logical_not", "x", x.dtype, {DType::kBool}));
  return x;
}

absl::Status LogicalNotKernel(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("logical_not", "x", x));
  LOOM_ASSIGN_OR_RETURN(kernels::TensorMeta m, InferLogicalNot(kernels::MetaOf(x)));
  LOOM_RETURN_IF_ERROR(CheckOutput("logical_not", "out", out, m.dtype, m.shape));
  const bool* px = static_cast<const bool*>(x.raw_data());
  bool* po = static_cast<bool*>(out.raw_data());
  StridedLoop loop = MakeLoop(out.shape(), {ContiguousStrides(out.shape()), x.strides()});
  ForRows(loop, [&](const int64_t* off, int64_t n, const int64_t* in) {
    for (int64_t j = 0; j < n; ++j) po[off[0] + j] = !px[off[1] + j * in[1]];
  });
  return absl::OkStatus();
}

absl::Status LogicalNotReference(const Tensor& x, Tensor& out) {
  LOOM_RETURN_IF_ERROR(CheckCpu("logical_not", "x", x));
  LOOM_ASSIGN_OR_RETURN(kernels::TensorMeta m, InferLogicalNot(kernels::MetaOf(x)));
  LOOM_RETURN_IF_ERROR(CheckOutput("logical_not", "out", out, m.dtype, m.shape));
  for (int64_t i = 0; i < out.numel(); ++i) out.SetDouble(i, x.GetDouble(i) != 0 ? 0 : 1);
  return absl::OkStatus();
}

absl::StatusOr<kernels::TensorMeta> InferWhere(const kernels::TensorMeta& cond, const kernels::TensorMeta& a,
                                               const kernels::TensorMeta& b) {
  LOOM_RETURN_IF_ERROR(CheckDType("where", "cond", cond.dtype, {DType::kBool}));
  LOOM_RETURN_IF_ERROR(CheckSameDType("where", "a", a.dtype, "b", b.dtype));
  LOOM_ASSIGN_OR_RETURN(Shape ca, BroadcastShapes("where", "cond", cond.shape, "a", a.shape));
  LOOM_ASSIGN_OR_RETURN(Shape s, BroadcastShapes("where", "cond and a", ca, "b", b.shape));
  return kernels::TensorMeta{a.dtype, s};
}

absl::Status WhereKernel(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateWhere(cond, a, b, out));
  switch (DTypeSize(a.dtype())) {
    case 1: WhereLoop<uint8_t>(cond, a, b, out); break;
    case 2: WhereLoop<uint16_t>(cond, a, b, out); break;
    case 4: WhereLoop<uint32_t>(cond, a, b, out); break;
    default: WhereLoop<uint64_t>(cond, a, b, out); break;
  }
  return absl::OkStatus();
}

absl::Status WhereReference(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  LOOM_RETURN_IF_ERROR(ValidateWhere(cond, a, b, out));
  LOOM_ASSIGN_OR_RETURN(Tensor ce, cond.Expand(out.shape()));
  LOOM_ASSIGN_OR_RETURN(Tensor ae, a.Expand(out.shape()));
  LOOM_ASSIGN_OR_RETURN(Tensor be, b.Expand(out.shape()));
  for (int64_t i = 0; i < out.numel(); ++i) CopyElement(ce.GetDouble(i) != 0 ? ae : be, i, out, i);
  return absl::OkStatus();
}

}  // namespace loom::kernels::cpu
