// Pass copy_back (after lower_nodes): a graph output that updates a graph
// input (GraphOutput::updates) but was not written in place gets a kCopyBack
// launch at the end of the step, copying it into the input's buffer.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class CopyBackPass : public PlanPass {
 public:
  absl::string_view name() const override { return "copy_back"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
