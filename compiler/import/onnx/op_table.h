// The ONNX ops Loom imports: one table, shown by `loom inspect` and
// `loom ops --onnx`, and used by the node-test runner to pick the cases in
// scope.
//
// Each entry names the ONNX op (default domain), the family file that
// converts it, the first opset whose form the converter reads, and the
// registry ops it lowers to. Converters handle every version of their op from
// `since` up to kMaxOpset (attribute-vs-input forms, changed defaults).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/import/onnx/builder.h"

namespace loom::compiler::import::onnx {

// The default-domain opsets a model may import.
inline constexpr int kMinOpset = 7;
inline constexpr int kMaxOpset = 17;

using ConvertFn = std::function<absl::Status(NodeCtx& n)>;

struct OpEntry {
  std::string op;       // ONNX op type
  std::string family;   // the file that converts it: "elementwise", "shape", ...
  int since = kMinOpset;
  std::string lowers_to;  // registry ops (or "constant" when always folded)
  ConvertFn convert = nullptr;
};

// Sorted by op name.
const std::vector<OpEntry>& SupportedOps();
const OpEntry* FindOp(const std::string& op_type);
// Why an op is refused: control flow and other known-unsupported ops get a
// specific reason; anything else "not supported".
std::string UnsupportedReason(const std::string& op_type);

// The family tables (one per file).
std::vector<OpEntry> ElementwiseOps();
std::vector<OpEntry> ShapeOps();
std::vector<OpEntry> IndexOps();
std::vector<OpEntry> ConstantOps();
std::vector<OpEntry> ReduceOps();
std::vector<OpEntry> NnOps();
std::vector<OpEntry> EinsumOps();
std::vector<OpEntry> LossOps();

}  // namespace loom::compiler::import::onnx
