// The cross-check of Loom's shapes against ONNX's own shape inference.
//
// A copy of the model's structure is made with every graph input and
// initializer given its static Loom type (small constants keep their values,
// so ONNX can read shapes from them; large ones become typed inputs, so the
// weights are not copied), ONNX's InferShapes runs on it, and every value it
// infers a fully static shape for must have the same dtype and shape in
// Loom's graph. Returns how many values agreed; a disagreement is
// InvalidArgument naming the value and both types.
#pragma once

#include "absl/status/statusor.h"
#include "compiler/import/onnx/builder.h"
#include "onnx/onnx_pb.h"

namespace loom::compiler::import::onnx {

absl::StatusOr<int> CrossCheckShapes(const ::onnx::ModelProto& model, Builder& b);

}  // namespace loom::compiler::import::onnx
