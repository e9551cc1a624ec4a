#include "compiler/import/onnx/params.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace loom::compiler::import::onnx {
namespace {

// Input slots through which a gradient flows, per ONNX op; ops not listed
// differentiate every input.
bool Differentiable(const std::string& op, int slot) {
  static const std::map<std::string, std::set<int>>* slots = new std::map<std::string, std::set<int>>{
      {"Gather", {0}}, {"Reshape", {0}}, {"Unsqueeze", {0}}, {"Squeeze", {0}}, {"Expand", {0}},
      {"Tile", {0}}, {"Slice", {0}}, {"Split", {0}}, {"Where", {1, 2}}, {"Trilu", {0}},
      {"Dropout", {0}}, {"ReduceSum", {0}}, {"ReduceMean", {0}}, {"ReduceMax", {0}},
      {"SoftmaxCrossEntropyLoss", {0, 2}}, {"NegativeLogLikelihoodLoss", {0, 2}},
      {"Equal", {}}, {"Less", {}}, {"Greater", {}}, {"LessOrEqual", {}}, {"GreaterOrEqual", {}},
      {"Not", {}}, {"And", {}}, {"Or", {}}, {"Shape", {}}, {"Size", {}}, {"ConstantOfShape", {}},
      {"Range", {}}, {"ArgMax", {}}, {"ArgMin", {}},
  };
  auto it = slots->find(op);
  return it == slots->end() || it->second.count(slot) > 0;
}

// Ops whose outputs never depend on the values of their inputs.
bool StaticOutput(const std::string& op) { return op == "Shape" || op == "Size"; }

absl::StatusOr<ParamSplit> FromMetadata(const std::string& list, const std::set<std::string>& inits,
                                        const std::set<std::string>& float_inits) {
  ParamSplit s;
  s.rule = ParamRule::kMetadata;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    std::string name(absl::StripAsciiWhitespace(part));
    if (name.empty()) continue;
    if (!inits.count(name))
      return absl::InvalidArgumentError(absl::StrCat("metadata '", kParametersKey, "': '", name, "' is not an initializer"));
    if (!float_inits.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat("metadata '", kParametersKey, "': initializer '", name, "' is not floating, so cannot be trained"));
    s.params.insert(name);
  }
  return s;
}

}  // namespace

absl::StatusOr<ParamSplit> ClassifyInitializers(const ::onnx::ModelProto& model, const std::vector<int>& order,
                                                const std::set<std::string>& inits,
                                                const std::set<std::string>& float_inits) {
  for (const auto& kv : model.metadata_props())
    if (kv.key() == kParametersKey) return FromMetadata(kv.value(), inits, float_inits);
  const ::onnx::GraphProto& g = model.graph();
  std::set<std::string> dd;  // data-dependent values
  for (const auto& in : g.input())
    if (!inits.count(in.name())) dd.insert(in.name());
  std::vector<bool> node_dd(g.node_size(), false);
  for (int i : order) {
    const auto& n = g.node(i);
    for (const auto& in : n.input()) node_dd[i] = node_dd[i] || dd.count(in) > 0;
    if (node_dd[i] && !StaticOutput(n.op_type()))
      for (const auto& out : n.output()) dd.insert(out);
  }
  std::set<std::string> reach, reach_dd;  // differentiable path to an output (through a dd node)
  for (const auto& out : g.output()) reach.insert(out.name());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const auto& n = g.node(*it);
    bool r = false, rd = false;
    for (const auto& out : n.output()) {
      r = r || reach.count(out) > 0;
      rd = rd || reach_dd.count(out) > 0;
    }
    if (!r) continue;
    for (int k = 0; k < n.input_size(); ++k) {
      if (n.input(k).empty() || !Differentiable(n.op_type(), k)) continue;
      reach.insert(n.input(k));
      if (rd || node_dd[*it]) reach_dd.insert(n.input(k));
    }
  }
  ParamSplit s;
  for (const std::string& name : float_inits)
    if (reach_dd.count(name)) s.params.insert(name);
  return s;
}

}  // namespace loom::compiler::import::onnx
