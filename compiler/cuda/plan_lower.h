// Pass lower_nodes: one launch per graph node not covered by a fusion pass's
// claim, in graph order (a fused claim is emitted at its head node), each
// operand in the storage dtype the kernel takes: a parameter read as bf16 gets
// its bf16 shadow, any other mismatch a cast launch in front (a temp value).
// reshape is an alias of its input's bytes (no launch); every adamw node
// becomes ONE multi-tensor AdamW launch, at the last of them, whose outputs
// alias param / m / v (updated in place). An op without a CUDA launch (or an
// f64 value) is Unimplemented naming the op and node.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class LowerNodesPass : public PlanPass {
 public:
  absl::string_view name() const override { return "lower_nodes"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
