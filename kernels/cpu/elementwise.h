// Elementwise CPU kernels: broadcasting binary ops and unary ops.
//
// Binary ops (add, sub, mul, div, maximum, minimum, pow, relu_backward)
// broadcast numpy-style; the output is contiguous with the broadcast shape.
// Unary ops map x -> f(x) with an optional scalar parameter (scale: s,
// add_scalar: s, pow_scalar: p). Inputs may be any strided host view.
//
// Floating dtypes: the fast kernels take f32, f64 and bf16 (bf16 computes in
// f32); the references compute in double element by element and take any
// floating dtype.
//
// Integer dtypes (i32, i64; both inputs the same): add, sub, mul, div,
// maximum, minimum, neg and abs. Arithmetic wraps (two's complement) as in
// PyTorch and numpy; div truncates toward zero (C, ONNX Runtime), INT_MIN / -1
// wraps to INT_MIN, and a zero divisor is InvalidArgument naming its
// position. The references compute in int64 and wrap into the dtype.
//
//   LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferBinary(BinaryOp::kAdd, MetaOf(a), MetaOf(b)));
//   Tensor out = Tensor::MustEmpty(m.shape, m.dtype);
//   LOOM_RETURN_IF_ERROR(BinaryKernel(BinaryOp::kAdd, a, b, out));
//
// Errors are InvalidArgument naming the op and argument ("add: b: ...").
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow, kReluBackward };
enum class UnaryOp {
  kNeg, kExp, kLog, kSqrt, kRsqrt, kTanh, kSigmoid, kRelu, kAbs, kScale, kAddScalar, kPowScalar,
  kErf, kSin, kCos, kReciprocal
};

absl::string_view OpName(BinaryOp op);  // "add", ..., "relu_backward"
absl::string_view OpName(UnaryOp op);   // "neg", ..., "reciprocal"
// Whether the op takes i32/i64 operands.
bool TakesIntegers(BinaryOp op);
bool TakesIntegers(UnaryOp op);
// Argument names used in errors: {"a", "b"}, or {"dy", "x"} for relu_backward.
absl::string_view ArgName(BinaryOp op, int i);

// The dtypes the fast kernels take (integers only for the ops above).
inline constexpr DType kElementwiseDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};

absl::StatusOr<kernels::TensorMeta> InferBinary(BinaryOp op, const kernels::TensorMeta& a,
                                                const kernels::TensorMeta& b);
absl::StatusOr<kernels::TensorMeta> InferUnary(UnaryOp op, const kernels::TensorMeta& x);

// `out` must be contiguous with the inferred meta.
absl::Status BinaryKernel(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
absl::Status BinaryReference(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
// `param` is s for scale/add_scalar, p for pow_scalar, ignored otherwise.
absl::Status UnaryKernel(UnaryOp op, const Tensor& x, double param, Tensor& out);
absl::Status UnaryReference(UnaryOp op, const Tensor& x, double param, Tensor& out);

}  // namespace loom::kernels::cpu
