// What `loom inspect model.onnx` and `loom ops --onnx` print.
//
// InspectModel reads the model, lists each op type it uses with Loom's
// support for it (the family that converts it and the registry ops it lowers
// to, or the reason it is refused), then imports it and prints the
// parameters (which rule classified them), buffers, data inputs, outputs,
// the parameter count, folding and shape-check figures, the matched
// recovery patterns, and the imported graph as IR text.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/import/onnx/importer.h"

namespace loom::compiler::import::onnx {

struct InspectResult {
  std::string text;
  bool imported = false;  // false: text ends with the import error
};

// Fails only when the file cannot be read as an ONNX model.
absl::StatusOr<InspectResult> InspectModel(const std::string& path, const ImportOptions& options, bool print_graph);

// The op table: op, first opset, family file, registry ops.
std::string FormatSupportedOps();

}  // namespace loom::compiler::import::onnx
