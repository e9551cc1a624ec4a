// Which initializers are trainable parameters and which are buffers.
//
// Metadata rule: the model's metadata_props key "loom.parameters" holds the
// parameter names, comma-separated (spaces around names ignored); every other
// initializer is a buffer. Each name must be a floating initializer.
//
// Reachability rule (no metadata): a floating initializer is a parameter when
// a differentiable path leads from it to a graph output through at least one
// node with a data-dependent operand (one computed from a data input; a Shape
// of anything is static, so not data-dependent). Index, shape, mask and
// comparison operands are not differentiable (Gather's indices, Reshape's
// shape, Where's condition, Equal's operands, ...). So a causal-mask buffer
// (Slice -> Equal -> Where's condition) is a buffer, and weights multiplied
// with activations are parameters; a buffer that flows into activations
// through arithmetic (a rotary inverse-frequency table) is classified as a
// parameter: such models need the metadata key.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/import/onnx/importer.h"
#include "onnx/onnx_pb.h"

namespace loom::compiler::import::onnx {

inline constexpr char kParametersKey[] = "loom.parameters";

struct ParamSplit {
  std::set<std::string> params;
  ParamRule rule = ParamRule::kReachability;
};

// `order`: node indices in topological order. `float_inits`: the floating
// initializers' names; `inits`: every initializer's name.
absl::StatusOr<ParamSplit> ClassifyInitializers(const ::onnx::ModelProto& model, const std::vector<int>& order,
                                                const std::set<std::string>& inits,
                                                const std::set<std::string>& float_inits);

}  // namespace loom::compiler::import::onnx
