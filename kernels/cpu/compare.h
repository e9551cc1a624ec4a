// Comparisons, logical ops and where on the host.
//
//   equal, less, less_equal, greater, greater_equal (a, b) -> bool
//       a and b share a dtype (floating, i32 or i64; equal also takes bool)
//       and broadcast numpy-style. Comparisons with NaN are false (also
//       equal(NaN, NaN)). bf16 compares as f32, exactly.
//   logical_and, logical_or (a, b) -> bool, logical_not(x) -> bool
//       bool operands only, broadcasting.
//   where(cond, a, b) -> a where cond, else b
//       cond is bool; a and b share any dtype; all three broadcast together
//       to the output shape.
//
// Inputs may be any strided host view; outputs are contiguous. The kernels
// take every dtype listed above; the references compare floating values as
// double and integer values as int64 (exact).
//
//   LOOM_ASSIGN_OR_RETURN(TensorMeta m, InferCompare(CompareOp::kLess, MetaOf(a), MetaOf(b)));
//   Tensor out = Tensor::MustEmpty(m.shape, DType::kBool);
//   LOOM_RETURN_IF_ERROR(CompareKernel(CompareOp::kLess, a, b, out));
//
// Errors are InvalidArgument naming the op and argument ("where: cond: ...").
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu {

enum class CompareOp { kEqual, kLess, kLessEqual, kGreater, kGreaterEqual, kLogicalAnd, kLogicalOr };
absl::string_view OpName(CompareOp op);  // "equal", ..., "logical_or"

absl::StatusOr<kernels::TensorMeta> InferCompare(CompareOp op, const kernels::TensorMeta& a,
                                                 const kernels::TensorMeta& b);
absl::Status CompareKernel(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out);
absl::Status CompareReference(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out);

absl::StatusOr<kernels::TensorMeta> InferLogicalNot(const kernels::TensorMeta& x);
absl::Status LogicalNotKernel(const Tensor& x, Tensor& out);
absl::Status LogicalNotReference(const Tensor& x, Tensor& out);

absl::StatusOr<kernels::TensorMeta> InferWhere(const kernels::TensorMeta& cond, const kernels::TensorMeta& a,
                                               const kernels::TensorMeta& b);
absl::Status WhereKernel(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);
absl::Status WhereReference(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace loom::kernels::cpu
