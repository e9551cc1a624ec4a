// ONNX TensorProto <-> Loom Tensor, with the checks a hostile file needs.
//
// Loom holds f64, f32, bf16, f16, i32, i64 and bool; any other ONNX element
// type (uint8, int8, int16, uint16, uint32, uint64, string, complex) is an
// error naming the type. Sizes are checked before anything is allocated:
// every dim >= 0, the element count within the limit without overflow, and
// the data present in exactly that size (raw_data, the typed fields, or an
// external file region).
//
// External data: `location` is resolved against the model's folder, symlinks
// followed (realpath), and must land inside one of the allowed roots (default:
// the model's folder); the region [offset, offset + length) must lie inside
// the file.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "onnx/onnx_pb.h"

namespace loom::compiler::import::onnx {

// ONNX TensorProto element type <-> Loom dtype.
absl::StatusOr<DType> LoomDType(int onnx_type);
int OnnxType(DType dtype);
std::string OnnxTypeName(int onnx_type);  // "FLOAT", "UINT8", ... ("type 99" when unknown)

struct TensorReadOptions {
  std::string base_dir;                    // where external data locations resolve; empty: none allowed
  std::vector<std::string> allowed_roots;  // empty: base_dir only
  int64_t max_elements = int64_t{1} << 33;
};

// The tensor a TensorProto holds. `what` names it in errors ("initializer 'w'").
absl::StatusOr<Tensor> FromTensorProto(const ::onnx::TensorProto& t, const TensorReadOptions& options,
                                       absl::string_view what);

// Element count of `dims` when every dim is >= 0 and the count is within
// `max_elements`; the error names `what`.
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> dims, int64_t max_elements, absl::string_view what);

// A TensorProto (raw_data, little-endian) holding `t` (tests and the exporter side).
::onnx::TensorProto ToTensorProto(const Tensor& t, const std::string& name);

}  // namespace loom::compiler::import::onnx
