// Reductions on the host: sum, mean, max and min over a set of axes, and the
// reduction behind sum_to (summing a broadcast result back to a shape).
//
// Axes are given as a per-dim mask (see AxesMask in check.h). The output holds
// the kept dims in order; with keepdim the reduced dims stay as size 1, which is
// the same memory layout, so ReduceKernel only needs `out` to be contiguous
// with the right element count.
//
// The fast kernel (f32, f64, bf16; accumulates in double) handles a single
// contiguous run of reduced dims directly (rows, columns, or the middle of a
// [outer, reduced, inner] view) and gathers the other cases into that form
// with one copy. max and min propagate NaN and reject an empty reduction.
//
// sum, max and min also take i32/i64 (ONNX ReduceSum/ReduceMax/ReduceMin on
// shape and mask tensors): exact int64 accumulation, sums wrap into the
// dtype; mean takes floating dtypes only.
//
//   LOOM_ASSIGN_OR_RETURN(auto mask, AxesMask("sum", "axes", {-1}, x.ndim()));
//   Tensor y = Tensor::MustEmpty(ReducedShape(x.shape(), mask, false), x.dtype());
//   LOOM_RETURN_IF_ERROR(ReduceKernel(ReduceOp::kSum, x, mask, y));
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu {

enum class ReduceOp { kSum, kMean, kMax, kMin };
absl::string_view OpName(ReduceOp op);  // "sum", "mean", "max", "min"

Shape ReducedShape(absl::Span<const int64_t> shape, const std::vector<bool>& mask, bool keepdim);

// Inference for sum/mean/max/min with attrs axes (empty = all) and keepdim.
absl::StatusOr<kernels::TensorMeta> InferReduce(ReduceOp op, const kernels::TensorMeta& x,
                                                absl::Span<const int64_t> axes, bool keepdim);

// The mask of dims of `from` that sum_to reduces to reach `to` (leading extra
// dims and dims where `to` has size 1); InvalidArgument naming attr "shape"
// when `to` does not broadcast to `from`.
absl::StatusOr<std::vector<bool>> SumToMask(absl::Span<const int64_t> from, absl::Span<const int64_t> to);

absl::Status ReduceKernel(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, Tensor& out);
absl::Status ReduceReference(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, Tensor& out);

}  // namespace loom::kernels::cpu
