// Pass split_master (plan_split.h).
#include "compiler/cuda/plan_split.h"

#include <vector>

namespace loom::compiler::cuda::plan_internal {

absl::StatusOr<bool> SplitMasterPass::Run(PlanState& s) {
  CudaPlan& p = s.p;
  if (!s.options.memory.split_master || !p.bf16) return false;
  // The roots whose bytes a launch other than the AdamW reads or writes.
  std::vector<bool> touched(p.metas.size(), false);
  auto mark = [&](int v) {
    if (v >= 0 && p.root[v] >= 0) touched[p.root[v]] = true;
  };
  for (const Launch& l : p.launches) {
    if (l.kind == LaunchKind::kAdamW) continue;
    for (int v : l.inputs) mark(v);
    for (int v : l.outputs) mark(v);
    for (const AttnView& a : l.attn) mark(a.value);
    if (l.copy_back_input >= 0) mark(s.g.inputs()[l.copy_back_input].value);
  }
  bool any = false;
  for (size_t k = 0; k < s.g.inputs().size(); ++k) {
    const ir::GraphInput& in = s.g.inputs()[k];
    if (in.kind != ir::InputKind::kParam || p.shadow[k] < 0 || p.metas[in.value].dtype != DType::kF32 ||
        touched[in.value])
      continue;
    p.split[k] = true;
    any = true;
  }
  return any;
}

}  // namespace loom::compiler::cuda::plan_internal
