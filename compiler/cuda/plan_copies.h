// Pass compose_copies (PlanOptions::compose_copies): chains of views around a
// copy become one strided copy (CopyGeom), composed with PyTorch's view rule
// (ViewStrides, plan.h):
//   slice -> reshape -> permute     one copy from the slice's source
//                                   (q, k, v out of the fused qkv)
//   permute -> reshape -> concat    one copy from the permute's source straight
//                                   into its window of the concat's output
//                                   (dq, dk, dv into dqkv); the concat's launch
//                                   carries it
// Runs after attention_views, which turns such chains feeding flash into
// views; what is left becomes copies. The strided copy launches themselves
// (permute, slice, cast, broadcast_to and the composed ones) are lower_nodes'
// (LowerCopy).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class ComposeCopiesPass : public PlanPass {
 public:
  absl::string_view name() const override { return "compose_copies"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

// The slice -> reshape -> permute chain headed by slice node i as one copy,
// or nullopt (not that chain, the view rule fails, or compose_copies is off).
std::optional<SliceChain> ComposeSliceChain(const PlanState& s, int i);
// Permute node i's output strides over its contiguous input.
std::vector<int64_t> PermuteStrides(const ir::Graph& g, int i);
// Whether permute node pm ends a chain ComposeSliceChain takes.
bool IsSliceChainPermute(const PlanState& s, int pm);
// lower_nodes' kCopy launch for a permute / slice / cast / broadcast_to node
// (or a composed slice chain); L has the node's outputs.
void LowerCopy(const PlanState& s, int i, Launch& L);

}  // namespace loom::compiler::cuda::plan_internal
