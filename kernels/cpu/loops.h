// Strided loops over up to four operands, the engine of the CPU elementwise,
// where, copy and broadcast kernels.
//
// A StridedLoop walks a logical shape in row-major order. Each operand has its
// own element strides over that shape (0 on broadcast dims, anything for
// transposed/sliced views). MakeLoop drops size-1 dims and merges dims that are
// contiguous for every operand, so a contiguous elementwise op becomes a single
// row. ForRows then hands out rows (the innermost dim) in parallel:
//
//   StridedLoop loop = MakeLoop(out.shape(), {out.strides(), a_bcast.strides()});
//   ForRows(loop, [&](const int64_t* off, int64_t n, const int64_t* inner) {
//     // element j of this row of operand k sits at base_k + off[k] + j * inner[k]
//   });
//
// CopyStrided copies any host tensor view into contiguous memory of the same
// dtype (the kernel behind Contiguous-style copies, permute, slice, expand);
// transpose-like views are copied in 32x32 tiles.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"
#include "base/tensor.h"

namespace loom::kernels::cpu {

constexpr int kMaxLoopOperands = 4;

struct StridedLoop {
  int num_operands = 0;
  Shape shape;  // collapsed; at least one dim
  std::vector<Strides> strides;  // [operand][dim]
  int64_t rows() const;          // product of all dims but the last
  int64_t inner() const { return shape.back(); }
};

// `strides` holds one entry per operand, each of length shape.size().
StridedLoop MakeLoop(absl::Span<const int64_t> shape, std::vector<Strides> strides);

// fn(offsets[num_operands], row_length, inner_strides[num_operands]) per row,
// rows split over the global thread pool when the loop is large.
using RowFn = std::function<void(const int64_t* off, int64_t n, const int64_t* inner)>;
void ForRows(const StridedLoop& loop, const RowFn& fn);

// Copies `src` (any strides, host) into `dst`, contiguous with src.shape() and
// src's dtype.
void CopyStrided(const Tensor& src, void* dst);
// Copies `src` into the view `dst` (same shape and dtype, both on the host;
// dst may be strided, e.g. a Narrow of a bigger tensor).
void CopyView(const Tensor& src, const Tensor& dst);

// Copies the view `src` (element 0 at `src`, element strides `src_strides`,
// any sign) into the view `dst` of the same `shape` (its own strides, any
// sign), elements of `elem` bytes: the engine of stepped slices.
void CopyRaw(absl::Span<const int64_t> shape, size_t elem, const void* src, absl::Span<const int64_t> src_strides,
             void* dst, absl::Span<const int64_t> dst_strides);

// Strides of `t` broadcast to `shape` (0 where t is broadcast); t must be
// broadcastable (checked by the caller).
Strides BroadcastStrides(const Tensor& t, absl::Span<const int64_t> shape);

// Below this many elements a loop runs on the calling thread.
constexpr int64_t kParallelMinElements = 1 << 15;

}  // namespace loom::kernels::cpu
