// gather and its adjoint gather_backward on the host (ONNX Gather semantics).
//
//   gather(x, indices) {axis}
//       out[i_0..i_{a-1}, j_0..j_{q-1}, k...] = x[i_0..i_{a-1}, indices[j], k...]
//       out shape = x.shape[:axis] + indices.shape + x.shape[axis+1:]
//       x: any dtype, rank >= 1; indices: i32 or i64, any rank (a scalar
//       index drops the axis); axis in [-rank, rank). Negative indices count
//       from the end; an index outside [-dim, dim) is InvalidArgument naming
//       the index and its position (checked before anything is written).
//   gather_backward(dy, indices) {axis, dim_size}
//       zeros of shape dy.shape[:axis] + [dim_size] + dy.shape[axis+q:]
//       (q = indices' rank; axis is x's axis), then
//       dx[.., indices[j], ..] += dy[.., j, ..] for j in order: a
//       deterministic scatter-add (duplicate indices accumulate, each output
//       element sums in index order). Floating dy only (kernel: f32, f64).
//
// The kernels view x as [outer, dim, inner] and move whole inner rows; the
// references index element by element.
//
//   LOOM_ASSIGN_OR_RETURN(GatherGeometry g, InferGather(MetaOf(x), MetaOf(idx), axis));
//   Tensor out = Tensor::MustEmpty(g.out.shape, g.out.dtype);
//   LOOM_RETURN_IF_ERROR(GatherKernel(x, idx, g.axis, out));
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu {

struct GatherGeometry {
  int axis = 0;  // normalised, in x's dims
  kernels::TensorMeta out;
};

absl::StatusOr<GatherGeometry> InferGather(const kernels::TensorMeta& x, const kernels::TensorMeta& indices,
                                           int64_t axis);
absl::StatusOr<GatherGeometry> InferGatherBackward(const kernels::TensorMeta& dy, const kernels::TensorMeta& indices,
                                                   int64_t axis, int64_t dim_size);

// The indices as int64 in [0, dim), or InvalidArgument naming the first bad one.
absl::StatusOr<std::vector<int64_t>> NormalizeIndices(absl::string_view op, const Tensor& indices, int64_t dim);

absl::Status GatherKernel(const Tensor& x, const Tensor& indices, int axis, Tensor& out);
absl::Status GatherReference(const Tensor& x, const Tensor& indices, int axis, Tensor& out);
absl::Status GatherBackwardKernel(const Tensor& dy, const Tensor& indices, int axis, Tensor& out);
absl::Status GatherBackwardReference(const Tensor& dy, const Tensor& indices, int axis, Tensor& out);

}  // namespace loom::kernels::cpu
