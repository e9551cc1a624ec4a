// Pass assign_arena (last): every launch output that is neither a graph
// input's buffer nor a bf16 shadow lives in one arena; its offset comes from
// the best-fit placement of compiler/passes/memory_plan.h (PlaceBest) over
// the liveness of launch positions (PlanMemory itself verifies a graph
// against the registry, so it cannot take a launch list with storage dtypes
// and fused patterns; the placement takes plain buffers). Sets CudaPlan::offset,
// arena_bytes and live_bytes_bound; Internal when a launch reads a value no
// earlier launch wrote.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class AssignArenaPass : public PlanPass {
 public:
  absl::string_view name() const override { return "assign_arena"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
