// Elementwise CPU kernels: broadcasting binary ops and unary ops.
//
// Binary ops (add, sub, mul, div, maximum, relu_backward) broadcast numpy-style;
// the output is contiguous with the broadcast shape. Unary ops map x -> f(x)
// with an optional scalar parameter (scale: s, add_scalar: s, pow_scalar: p).
// Inputs may be any strided host view. The fast kernels take f32, f64 and bf16
// (bf16 computes in f32); the references compute in double element by element
// and take any floating dtype.
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

namespace loom::cpu {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMaximum, kReluBackward };
enum class UnaryOp { kNeg, kExp, kLog, kSqrt, kRsqrt, kTanh, kSigmoid, kRelu, kAbs, kScale, kAddScalar, kPowScalar };

absl::string_view OpName(BinaryOp op);  // "add", ..., "relu_backward"
absl::string_view OpName(UnaryOp op);   // "neg", ..., "pow_scalar"
// Argument names used in errors: {"a", "b"}, or {"dy", "x"} for relu_backward.
absl::string_view ArgName(BinaryOp op, int i);

// The dtypes the fast kernels take.
inline constexpr DType kElementwiseDTypes[] = {DType::kF32, DType::kF64, DType::kBF16};

absl::StatusOr<ops::TensorMeta> InferBinary(BinaryOp op, const ops::TensorMeta& a, const ops::TensorMeta& b);
absl::StatusOr<ops::TensorMeta> InferUnary(UnaryOp op, const ops::TensorMeta& x);

// `out` must be contiguous with the inferred meta.
absl::Status BinaryKernel(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
absl::Status BinaryReference(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
// `param` is s for scale/add_scalar, p for pow_scalar, ignored otherwise.
absl::Status UnaryKernel(UnaryOp op, const Tensor& x, double param, Tensor& out);
absl::Status UnaryReference(UnaryOp op, const Tensor& x, double param, Tensor& out);

}  // namespace loom::cpu
