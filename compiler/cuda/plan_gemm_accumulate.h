// Pass gemm_accumulate (PlanOptions::accumulate_gemms):
//   add / fused adds of 2..4 operands, each the plain GEMM output (epilogue
//   kNone, not a weight gradient) of a matmul that only this sum reads, all
//   of the sum's shape and storage dtype
// becomes those GEMMs writing one buffer, the sum: the first (in graph
// order) stores its product there, each later one adds its product into it
// (GemmPlan::accumulate, beta 1), rounding once per GEMM. The add is covered
// by the last GEMM and the products are never materialised. Llama's
// backward has two such sums per layer: the input gradient of the gate and
// up projections, and that of q, k and v.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class GemmAccumulatePass : public PlanPass {
 public:
  absl::string_view name() const override { return "gemm_accumulate"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

}  // namespace loom::compiler::cuda::plan_internal
