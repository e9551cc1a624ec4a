// Pass gemm_epilogues: each matmul's GEMM (shape, batched strides) and what
// folds into it, recorded in PlanState::gemm for lower_nodes (LowerMatmul):
//   matmul(trans_a, [..,K,M] x [..,K,N]) -> sum_to([M,N])
//                                 one GEMM with K = batch * K (weight gradient)
//   matmul -> add(bias[N])        epilogue kBias
//   ... -> gelu(tanh), N % 8 == 0  kBiasGeluAux (aux = the pre-activation)
//   matmul -> gelu_backward(dy = it, x), tanh, N % 8 == 0
//                                 kDGelu (aux = x)
// The folded nodes are covered by the matmul and the matmul's own output is
// never materialised. A matmul of shapes the GEMM does not take is left
// unclaimed: lower_nodes reports it.
#pragma once

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class GemmEpiloguesPass : public PlanPass {
 public:
  absl::string_view name() const override { return "gemm_epilogues"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

// lower_nodes' GEMM launch for matmul node i (L: its launch so far), with the
// operands in the compute dtype (casts and bf16 shadows as needed).
absl::Status LowerMatmul(PlanState& s, int i, Launch L);

}  // namespace loom::compiler::cuda::plan_internal
