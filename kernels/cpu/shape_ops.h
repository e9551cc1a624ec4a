// Shape and data-movement kernels on the host: reshape, permute, slice,
// slice_backward, concat, broadcast_to, cast, fill.
//
// Each op has an Infer* (shape/dtype inference and argument validation; errors
// name the attribute or input, e.g. "permute: dims: [0, 0] is not a
// permutation of 2 dims"), a fast kernel and a plain reference. The movement
// kernels take any dtype (floating, i32, i64, bool) and any strided input:
// they build a view of the input (Tensor::Permute/Narrow/Expand) and copy it
// with CopyStrided/CopyView from loops.h. The references index element by
// element (CopyElement: exact for integers). cast and fill convert with
// ConvertTo (convert.h): float -> int truncates toward zero and saturates,
// int -> int wraps, anything -> bool is != 0.
//
// Attribute conventions (op catalogue): axes accept negatives; reshape's shape
// may hold one -1; slice's start may be negative (counted from the end).
//
// slice takes `length` elements along `axis`: x[start + k * step] for k in
// [0, length), step != 0 (default 1; negative steps walk backwards from
// start, as in ONNX Slice with the bounds already resolved). Every taken
// index must lie in [0, dim). slice_backward is its adjoint: zeros of length
// full_len with dy written at start + k * step.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu {

// ---- Inference (also resolves attrs into normalised form).
absl::StatusOr<Shape> InferReshape(absl::Span<const int64_t> x, absl::Span<const int64_t> shape);
// Normalised permutation (negatives resolved).
absl::StatusOr<std::vector<int>> NormalizePerm(absl::Span<const int64_t> dims, int rank);
struct SliceArgs {
  int axis = 0;
  int64_t start = 0, length = 0, step = 1;
};
absl::StatusOr<SliceArgs> NormalizeSlice(absl::Span<const int64_t> x, int64_t axis, int64_t start,
                                         int64_t length, int64_t step = 1);
// slice_backward(dy) attrs axis, start, full_len, step: output shape.
absl::StatusOr<Shape> InferSliceBackward(absl::Span<const int64_t> dy, int64_t axis, int64_t start,
                                         int64_t full_len, int64_t step = 1);
absl::StatusOr<kernels::TensorMeta> InferConcat(absl::Span<const kernels::TensorMeta> inputs, int64_t axis);

// ---- Fast kernels (out contiguous, preallocated with the inferred meta).
absl::Status ReshapeKernel(const Tensor& x, Tensor& out);
absl::Status PermuteKernel(const Tensor& x, const std::vector<int>& perm, Tensor& out);
absl::Status SliceKernel(const Tensor& x, const SliceArgs& s, Tensor& out);
absl::Status SliceBackwardKernel(const Tensor& dy, int axis, int64_t start, Tensor& out, int64_t step = 1);
absl::Status ConcatKernel(absl::Span<const Tensor> inputs, int axis, Tensor& out);
absl::Status BroadcastToKernel(const Tensor& x, Tensor& out);
absl::Status CastKernel(const Tensor& x, Tensor& out);  // out's dtype is the target
absl::Status FillKernel(double value, Tensor& out);

// ---- References.
absl::Status ReshapeReference(const Tensor& x, Tensor& out);
absl::Status PermuteReference(const Tensor& x, const std::vector<int>& perm, Tensor& out);
absl::Status SliceReference(const Tensor& x, const SliceArgs& s, Tensor& out);
absl::Status SliceBackwardReference(const Tensor& dy, int axis, int64_t start, Tensor& out, int64_t step = 1);
absl::Status ConcatReference(absl::Span<const Tensor> inputs, int axis, Tensor& out);
absl::Status BroadcastToReference(const Tensor& x, Tensor& out);
absl::Status CastReference(const Tensor& x, Tensor& out);
absl::Status FillReference(double value, Tensor& out);

}  // namespace loom::kernels::cpu
