// Internals shared by the pointwise code generator's files and its test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/cuda/codegen/pointwise.h"

namespace loom::compiler::cuda_codegen {

// InvalidArgument "pointwise codegen: <field>: <msg>".
absl::Status CodegenError(absl::string_view field, absl::string_view msg);

// Number of inputs a supported body op takes; -1 for an unsupported op.
int OpArity(const std::string& op);
// The f32 expression of body node `n` over input expressions `x`
// (pointwise_ops.cc); errors name `where` (the node) and the op or attribute.
absl::StatusOr<std::string> NodeExpr(const Node& n, const std::vector<std::string>& x, const std::string& where);

// A CUDA float literal that reproduces static_cast<float>(v) exactly.
std::string FloatLiteral(double v);
// 64-bit FNV-1a.
uint64_t HashString(absl::string_view s);
// Checks the spec's fields (InvalidArgument naming the field or body node).
absl::Status ValidateSpec(const PwSpec& spec);

// Cache file format: "LOOMCBN1", u64 payload size, u64 FNV-1a of the payload,
// then the CUBIN. Returns the payload, or "" when `file` is not a valid entry.
std::string DecodeCacheEntry(const std::string& file);
std::string EncodeCacheEntry(const std::string& cubin);

// Compiles any source with the generator's NVRTC options (tests compile many
// kernels as one program). `name` only labels errors.
absl::StatusOr<std::string> NvrtcCompileSource(const std::string& source, const std::string& name,
                                               const std::string& arch);

// Tests: behave as if NVRTC could not be opened (cache lookups only).
void SetNvrtcDisabledForTesting(bool disabled);

// "NVRTC 13.0 (libnvrtc.so.13)", or why NVRTC is unavailable.
std::string NvrtcInfo();

// The kernel's `vec` argument: 1 when the W-wide vector path may run (the kernel has it
// and every linearly accessed pointer, at its offset, is 4-element aligned).
int ChooseVectorPath(const GeneratedKernel& gen, absl::Span<const void* const> inputs,
                     absl::Span<const DType> in_dtypes, const void* out, DType out_dtype);

}  // namespace loom::compiler::cuda_codegen
