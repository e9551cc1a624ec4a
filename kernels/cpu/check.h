// Argument validation shared by CPU kernels, InferFns and other kernel helpers.
//
// Every check returns OK or InvalidArgument whose message is
//   "<op>: <arg>: <what is wrong>"
// e.g. "matmul: b: expected at least 2 dims, got 1". Kernels call these at their
// API boundary so bad input is an error naming the argument, never a crash.
//
//   LOOM_RETURN_IF_ERROR(CheckCpu("add", "a", a));
//   LOOM_RETURN_IF_ERROR(CheckDType("add", "a", a.dtype(), {DType::kF32, DType::kF64}));
//   LOOM_ASSIGN_OR_RETURN(Shape out, BroadcastShapes("add", "a", a.shape(), "b", b.shape()));
//   LOOM_ASSIGN_OR_RETURN(int axis, NormalizeAxis("concat", "axis", -1, rank));
//
// Shapes are taken as spans, so Shape, std::vector<int64_t> and TensorMeta::shape
// all work.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/tensor.h"

namespace loom::kernels::cpu {

// "<op>: <arg>: <msg>" as InvalidArgument.
absl::Status ArgError(absl::string_view op, absl::string_view arg, absl::string_view msg);

// The tensor is defined and lives on the host.
absl::Status CheckCpu(absl::string_view op, absl::string_view arg, const Tensor& t);

// `got` is one of `allowed` ("expected f32 or f64, got i32").
absl::Status CheckDType(absl::string_view op, absl::string_view arg, DType got,
                        absl::Span<const DType> allowed);
absl::Status CheckDType(absl::string_view op, absl::string_view arg, DType got,
                        std::initializer_list<DType> allowed);
// A floating dtype (f64, f32, bf16, f16).
absl::Status CheckFloating(absl::string_view op, absl::string_view arg, DType got);
// Two arguments share a dtype ("b: dtype f64 does not match a: f32").
absl::Status CheckSameDType(absl::string_view op, absl::string_view arg_a, DType a,
                            absl::string_view arg_b, DType b);

// min_rank <= rank <= max_rank (max_rank < 0: no upper bound).
absl::Status CheckRank(absl::string_view op, absl::string_view arg, absl::Span<const int64_t> shape,
                       int min_rank, int max_rank = -1);
absl::Status CheckSameShape(absl::string_view op, absl::string_view arg_a, absl::Span<const int64_t> a,
                            absl::string_view arg_b, absl::Span<const int64_t> b);
// Every size is >= 0 (for shapes given as attributes).
absl::Status CheckShapeAttr(absl::string_view op, absl::string_view attr, absl::Span<const int64_t> shape);

// numpy broadcasting of two shapes; the error names both arguments and the dim.
absl::StatusOr<Shape> BroadcastShapes(absl::string_view op, absl::string_view arg_a,
                                      absl::Span<const int64_t> a, absl::string_view arg_b,
                                      absl::Span<const int64_t> b);
// `from` broadcasts to exactly `to` (what sum_to/broadcast_to need).
absl::Status CheckBroadcastableTo(absl::string_view op, absl::string_view arg,
                                  absl::Span<const int64_t> from, absl::Span<const int64_t> to);

// Maps axis in [-rank, rank) to [0, rank); `attr` names the attribute.
absl::StatusOr<int> NormalizeAxis(absl::string_view op, absl::string_view attr, int64_t axis, int rank);
// Axes list -> per-dim mask of length rank; empty list = all dims. Duplicates
// are an error.
absl::StatusOr<std::vector<bool>> AxesMask(absl::string_view op, absl::string_view attr,
                                           absl::Span<const int64_t> axes, int rank);

// An output tensor the caller preallocated has this dtype and shape, is on the
// host and contiguous (for kernels called directly, not through RunOp).
absl::Status CheckOutput(absl::string_view op, absl::string_view arg, const Tensor& out, DType dtype,
                         absl::Span<const int64_t> shape);

}  // namespace loom::kernels::cpu
