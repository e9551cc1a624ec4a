// The copy_back pass (plan_copy_back.h).
#include "compiler/cuda/plan_copy_back.h"

#include <utility>

namespace loom::compiler::cuda::plan_internal {

absl::StatusOr<bool> CopyBackPass::Run(PlanState& s) {
  const ir::Graph& g = s.g;
  bool changed = false;
  for (const ir::GraphOutput& o : g.outputs()) {
    if (o.updates < 0) continue;
    if (s.p.input_of[o.value] == o.updates && s.p.root[o.value] == g.inputs()[o.updates].value) continue;
    Launch c;
    c.kind = LaunchKind::kCopyBack;
    c.op = "copy_back";
    c.inputs = {o.value};
    c.copy_back_input = o.updates;
    s.p.launches.push_back(std::move(c));
    changed = true;
  }
  return changed;
}

}  // namespace loom::compiler::cuda::plan_internal
