// Local (no communication) tensor helpers used by Redistribute.
//
// All helpers are exact for every dtype: copies move raw bytes (an i64 above
// 2^53 survives, unlike Tensor::CopyFrom's per-element double path for
// strided views), and scaling computes in double for floating types and in
// int64 for integer types (division truncates toward zero).
//
//   CopyRegion(dst.Narrow(0, 2, 3), src.Narrow(1, 0, 3).Transpose(0, 1));
//   Tensor s = SliceCopy(t, /*dim=*/1, /*offset=*/4, /*length=*/2);
//   ScaleInPlace(t, 1, 3);   // t = t * 1 / 3
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "base/tensor.h"

namespace loom::dtensor {

// Copies src into dst element-wise; shapes and dtypes must match (dst may be a
// strided view: it writes through to dst's storage). Host tensors only.
absl::Status CopyRegion(const Tensor& dst, const Tensor& src);

// A fresh contiguous copy of t.Narrow(dim, offset, length).
Tensor SliceCopy(const Tensor& t, int dim, int64_t offset, int64_t length);

// A zero tensor of `shape` with `src` copied at offset 0 of every dim
// (src.dim(i) <= shape[i]).
Tensor ZeroPad(const Tensor& src, absl::Span<const int64_t> shape);

// t = t * num / den in place (t contiguous). Integer dtypes use integer
// arithmetic (truncating division); bool is left unchanged.
void ScaleInPlace(const Tensor& t, int64_t num, int64_t den);

}  // namespace loom::dtensor
