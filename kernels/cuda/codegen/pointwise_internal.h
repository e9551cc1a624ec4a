// Internals shared by the pointwise code generator's files and its test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/cuda/codegen/nvrtc_cache.h"
#include "kernels/cuda/codegen/pointwise.h"

namespace loom::kernels::cuda::codegen {

// InvalidArgument "pointwise codegen: <field>: <msg>".
absl::Status CodegenError(absl::string_view field, absl::string_view msg);

// Number of inputs a supported body op takes; -1 for an unsupported op.
int OpArity(const std::string& op);
// The f32 expression of body node `n` over input expressions `x`
// (pointwise_ops.cc); errors name `where` (the node) and the op or attribute.
absl::StatusOr<std::string> NodeExpr(const PwNode& n, const std::vector<std::string>& x, const std::string& where);

// A CUDA float literal that reproduces static_cast<float>(v) exactly.
std::string FloatLiteral(double v);
// Checks the spec's fields (InvalidArgument naming the field or body node).
absl::Status ValidateSpec(const PwSpec& spec);

// The kernel's `vec` argument: 1 when the W-wide vector path may run (the kernel has it
// and every linearly accessed pointer, at its offset, is 4-element aligned).
int ChooseVectorPath(const GeneratedKernel& gen, absl::Span<const void* const> inputs,
                     absl::Span<const DType> in_dtypes, const void* out, DType out_dtype);

}  // namespace loom::kernels::cuda::codegen
