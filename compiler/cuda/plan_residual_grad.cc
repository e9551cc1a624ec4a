// The residual_grad pass (plan_residual_grad.h).
#include "compiler/cuda/plan_residual_grad.h"

namespace loom::compiler::cuda::plan_internal {

absl::StatusOr<bool> ResidualGradPass::Run(PlanState& s) {
  if (!s.options.fold_residual_grad) return false;
  const ir::Graph& g = s.g;
  bool changed = false;
  for (int i = 0; i < s.nn; ++i) {
    const ir::Node& n = g.nodes()[i];
    if ((n.op != "layernorm_backward" && n.op != "rmsnorm_backward") || s.covered(i) || n.outputs.empty()) continue;
    const int dx = n.outputs[0];
    const DType dt = s.p.metas[dx].dtype;
    const int su = s.single_user(dx);
    if (su < 0 || g.nodes()[su].op != "add") continue;
    const ir::Node& a = g.nodes()[su];
    const int other = a.inputs[0] == dx ? a.inputs[1] : a.inputs[0];
    if (other != dx && g.meta(other).shape == g.meta(dx).shape && s.p.metas[other].dtype == dt &&
        s.p.metas[a.outputs[0]].dtype == dt && g.meta(a.outputs[0]).shape == g.meta(dx).shape &&
        s.available_before(other, i) && s.materialized(other)) {
      s.residual_add[i] = su;
      s.Cover(su, i);
      s.virtual_value[dx] = true;
      changed = true;
    }
  }
  return changed;
}

}  // namespace loom::compiler::cuda::plan_internal
