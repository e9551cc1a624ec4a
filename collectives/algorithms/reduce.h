// Element-wise reductions used by every algorithm: acc[i] = acc[i] (op) in[i].
//
// bf16/f16 reduce in float and round once per step. bool: sum/max are logical
// or, product/min logical and; avg is undefined for bool. kAvg reduces as a sum;
// the caller divides once at the end with DivideInPlace (integers truncate).
//
// Speed: the library builds with -O3 so every f32/f64/i32/i64 op vectorises
// (acc and in must not overlap); bf16/f16 run 8 lanes at a time in AVX2 (+F16C
// for f16) with results bit-identical to the scalar per-element rounding (a NaN result
// may carry either operand's payload, as with the scalar loop).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "collectives/types.h"

namespace loom::collectives::algorithms {

// InvalidArgument when `op` is undefined for `dtype` (avg on bool).
absl::Status CheckReducible(DType dtype, ReduceOp op);
void ReduceInto(DType dtype, ReduceOp op, void* acc, const void* in, size_t count);
void DivideInPlace(DType dtype, void* buf, size_t count, int divisor);
// The scalar reference of ReduceInto for bf16/f16 (other dtypes: ReduceInto);
// the test checks the vector path against it.
void ReduceHalfScalarForTest(DType dtype, ReduceOp op, void* acc, const void* in, size_t count);

}  // namespace loom::collectives::algorithms
