#include "compiler/passes/cast_policy.h"

namespace loom::compiler::passes {

CastPolicy KeepPrecision() {
  return [](const ir::Graph&, const ir::Node&) -> std::optional<DType> { return std::nullopt; };
}

CastPolicy ComputeIn(DType dtype, std::set<std::string> ops) {
  return [dtype, ops = std::move(ops)](const ir::Graph& g, const ir::Node& n) -> std::optional<DType> {
    if (!ops.count(n.op) || n.outputs.empty() || !IsFloating(g.meta(n.outputs[0]).dtype)) return std::nullopt;
    return dtype;
  };
}

absl::StatusOr<bool> CastPolicyPass::Run(ir::Graph& g) {
  bool changed = false;
  for (ir::Node& n : g.mutable_nodes()) {
    std::optional<DType> d = policy_ ? policy_(g, n) : std::nullopt;
    if (d && n.compute_dtype != d) {
      n.compute_dtype = d;
      changed = true;
    }
  }
  return changed;
}

}  // namespace loom::compiler::passes
