// Pass fuse_cross_entropy (PlanOptions::fuse_cross_entropy, after
// lower_nodes): a cross_entropy launch and its cross_entropy_backward become
// one kCrossEntropyFused launch at the backward's position (inputs {dloss,
// logits, targets}, outputs {loss, lse, dlogits}) when no launch in between
// reads the loss or lse or writes the logits or targets: each row of logits is
// read from memory once instead of twice. FuseCrossEntropy (plan.h) is the
// same rewrite on any launch list.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class FuseCrossEntropyPass : public PlanPass {
 public:
  absl::string_view name() const override { return "fuse_cross_entropy"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
