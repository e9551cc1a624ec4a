// Pass attention_views (PlanOptions::attn_views, bf16 only): flash-eligible
// sdpa / sdpa_backward nodes (bf16, D 64/128, no mask or dropout) read and
// write strided windows of other values instead of copies around them:
//   q, k, v: windows of the fused qkv GEMM output (a slice -> reshape ->
//     permute chain, or a permute, read only by flash, becomes a view);
//   o: written in [B, T, H, D] order when its only readers are one permute to
//     that order (then an alias) and the sdpa_backward;
//   dout: a view of the upstream gradient (its permute becomes a view);
//   dq, dk, dv: written straight into their windows of the concat of
//     permute -> reshape of each (with PlanOptions::compose_copies), or in
//     [B, T, H, D] order when each is read only by a permute to that order.
// The claims (PlanState::attn, attn_view) cover the replaced nodes; views must
// keep flash's layout rules (unit last stride, 16-byte aligned rows).
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/cuda/plan_state.h"

namespace loom::compiler::cuda::plan_internal {

class AttentionViewsPass : public PlanPass {
 public:
  absl::string_view name() const override { return "attention_views"; }
  absl::StatusOr<bool> Run(PlanState& s) override;
};

// A flash-eligible sdpa / sdpa_backward node.
bool FlashNode(const PlanState& s, int node);
// Flash's layout rules for a view at element `offset` with 4 strides, head dim d.
bool FlashStridesOk(int64_t offset, const std::vector<int64_t>& strides, int64_t d);

}  // namespace loom::compiler::cuda::plan_internal
