// Reading and structural checks of an ONNX model, before any conversion.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/import/onnx/importer.h"
#include "onnx/onnx_pb.h"

namespace loom::compiler::import::onnx {

// Parses a model from a file (streamed, at most max_model_bytes) or bytes.
// A truncated or malformed message is InvalidArgument.
absl::StatusOr<::onnx::ModelProto> ReadModelFile(const std::string& path, int64_t max_model_bytes);
absl::StatusOr<::onnx::ModelProto> ParseModelBytes(absl::string_view bytes, int64_t max_model_bytes);

// The default-domain opset the model imports; outside [kMinOpset, kMaxOpset]
// is an error naming it.
absl::StatusOr<int> ModelOpset(const ::onnx::ModelProto& model);

// Checks names and structure (unique value names, every node input defined,
// graph outputs defined, no cycles, at most max_nodes nodes, names the IR
// text can carry) and returns the nodes in topological order.
absl::StatusOr<std::vector<int>> CheckGraph(const ::onnx::GraphProto& g, int max_nodes);

// The graph inputs (not initializers) that `value` is computed from.
std::set<std::string> UpstreamInputs(const ::onnx::GraphProto& g, const std::string& value,
                                     const std::set<std::string>& initializers);

// "node 'NAME' (OpType, opset N)", or "node #i (OpType, opset N)" without a name.
std::string NodeDisplay(const ::onnx::NodeProto& n, int index, int opset);

}  // namespace loom::compiler::import::onnx
