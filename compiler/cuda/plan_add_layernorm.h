// Pass add_layernorm (PlanOptions::add_layernorm):
//   add / fused adds (2..4 float operands, [.., C] broadcast only over leading
//   dims) -> layernorm or rmsnorm (the add's output as x)
// becomes one launch of the generated norm (kernels/cuda/codegen/rowwise.h)
// at the add's place: layernorm inputs {addends.., weight, bias}, outputs
// {sum, y, mean, rstd}; rmsnorm (attr rms) inputs {addends.., weight},
// outputs {sum, y, rstd}. The sum is still stored (it is the next residual).
// The norm node is covered.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class AddLayerNormPass : public PlanPass {
 public:
  absl::string_view name() const override { return "add_layernorm"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
