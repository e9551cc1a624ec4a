// Element-wise reductions used by every algorithm: acc[i] = acc[i] (op) in[i].
//
// bf16/f16 reduce in float and round once per step. bool: sum/max are logical
// or, product/min logical and; avg is undefined for bool. kAvg reduces as a sum;
// the caller divides once at the end with DivideInPlace (integers truncate).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "collectives/types.h"

namespace loom::collectives {

// InvalidArgument when `op` is undefined for `dtype` (avg on bool).
absl::Status CheckReducible(DType dtype, ReduceOp op);
void ReduceInto(DType dtype, ReduceOp op, void* acc, const void* in, size_t count);
void DivideInPlace(DType dtype, void* buf, size_t count, int divisor);

}  // namespace loom::collectives
