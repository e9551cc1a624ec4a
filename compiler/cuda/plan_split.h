// Pass split_master (after copy_back and fuse_cross_entropy, before
// assign_arena; MemoryPolicy::split_master): marks the parameters stored in
// the split layout (CudaPlan::split). A parameter qualifies when it is an f32
// graph input with a bf16 shadow and no launch but the AdamW reads or writes
// its own bytes: every other reader goes through the shadow (the GEMMs). A
// cast of it, a view, a copy-back or any other op on the f32 value keeps the
// plain layout, and the shadow its own buffer.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class SplitMasterPass : public PlanPass {
 public:
  absl::string_view name() const override { return "split_master"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
