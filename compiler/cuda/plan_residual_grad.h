// Pass residual_grad (PlanOptions::fold_residual_grad):
//   layernorm_backward / rmsnorm_backward -> add(other, dx)
// becomes one norm backward launch that adds the residual branch's gradient
// itself (the kernel's dresidual) and writes the sum; the add is covered and
// dx is never materialised.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class ResidualGradPass : public PlanPass {
 public:
  absl::string_view name() const override { return "residual_grad"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
