// Pass storage_dtypes (first of PlanCuda's pipeline): the storage dtype of
// every graph value under the mixed-precision policy (StorageDTypes, plan.h),
// and the plan's value metas from it. Everything after reads PlanState::st.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class StorageDTypesPass : public PlanPass {
 public:
  absl::string_view name() const override { return "storage_dtypes"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
