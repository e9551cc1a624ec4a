// Batched matrix multiply on the host: out[..., M, N] = op(a) @ op(b), where
// op transposes the last two dims of an input when its trans flag is set.
//
//   a: [..., M, K] (trans_a: [..., K, M]),  b: [..., K, N] (trans_b: [..., N, K])
//
// Batch dims (all but the last two) broadcast numpy-style, so b may be 2-D
// against a batched a, or the other way round. Each input needs >= 2 dims.
//
// The fast kernel calls OpenBLAS (cblas_sgemm for f32, cblas_dgemm for f64;
// bf16/f16 inputs are widened to f32, multiplied by sgemm, rounded once).
// Strided inputs whose last two dims are row- or column-major (e.g. a
// Transpose(-1, -2) view) go to BLAS without a copy; anything else is packed
// first. When b has no batch of its own and a is contiguous, the batch folds
// into M. The work is split into tasks (batch entries, then row or column
// blocks) run on Loom's thread pool (base/thread_pool.h), each a
// single-threaded GEMM: OpenBLAS is switched to one thread for the duration
// of the call and restored afterwards. The reference is a plain triple loop
// in double.
//
//   LOOM_ASSIGN_OR_RETURN(Shape s, MatMulShape(a.shape(), b.shape(), false, true));
//   Tensor c = Tensor::MustEmpty(s, DType::kF32);
//   LOOM_RETURN_IF_ERROR(MatMul(a, b, /*trans_a=*/false, /*trans_b=*/true, c));
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/tensor.h"

namespace loom::kernels::cpu {

// Output shape; InvalidArgument naming "a"/"b" for bad ranks or mismatched K.
absl::StatusOr<Shape> MatMulShape(absl::Span<const int64_t> a, absl::Span<const int64_t> b, bool trans_a,
                                  bool trans_b);

// Fast kernel: f32, f64, bf16 or f16, same dtype for a, b and out; out contiguous.
absl::Status MatMul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& out);
// Reference: any floating dtypes, accumulates in double.
absl::Status MatMulReference(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& out);

}  // namespace loom::kernels::cpu
