// The add_layernorm pass (plan_add_layernorm.h).
#include "compiler/cuda/plan_add_layernorm.h"

#include <algorithm>

namespace loom::compiler::cuda::plan_internal {

namespace {

// Node i is an `add`, or a fused node made of adds only, of 2..4 float
// operands that are [.., C] and broadcast only over leading dims, whose output
// is read as x by a layernorm (weight and bias) or an rmsnorm (weight) whose
// output is f32 or bf16 (the sum's dtype, or bf16 from an f32 residual
// stream) and whose statistics are f32. Returns that norm's node, or -1.
int AddLayerNormUser(const PlanState& s, int i) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  if (n.outputs.size() != 1 || n.inputs.size() < 2 || n.inputs.size() > 4) return -1;
  if (n.op == ir::kFusedOp) {
    if (!n.subgraph || n.subgraph->outputs().size() != 1) return -1;
    for (const ir::Node& b : n.subgraph->nodes())
      if (b.op != "add") return -1;
  } else if (n.op != "add") {
    return -1;
  }
  const int h = n.outputs[0];
  const Shape& os = g.meta(h).shape;
  const DType dt = s.p.metas[h].dtype;
  if (os.empty() || (dt != DType::kF32 && dt != DType::kBF16)) return -1;
  for (int v : n.inputs) {
    const Shape& sh = g.meta(v).shape;
    size_t lead = 0;
    while (lead < sh.size() && sh[lead] == 1 && sh.size() - lead > 1) ++lead;
    if (sh.empty() || sh.size() - lead > os.size() ||
        !std::equal(sh.begin() + lead, sh.end(), os.end() - (sh.size() - lead)))
      return -1;
    if (s.p.metas[v].dtype != DType::kF32 && s.p.metas[v].dtype != DType::kBF16) return -1;
  }
  for (int j : s.users[h]) {
    const ir::Node& u = g.nodes()[j];
    const size_t nin = u.op == "layernorm" ? 3 : u.op == "rmsnorm" ? 2 : 0;
    if (nin == 0 || u.inputs.size() != nin || u.inputs[0] != h) continue;
    const DType ydt = s.p.metas[u.outputs[0]].dtype;
    bool ok = ydt == DType::kF32 || ydt == DType::kBF16;
    for (size_t k = 1; k < nin; ++k) ok = ok && u.inputs[k] != h && s.prod[u.inputs[k]] < i;
    for (size_t k = 1; k < u.outputs.size(); ++k) ok = ok && s.p.metas[u.outputs[k]].dtype == DType::kF32;
    if (ok) return j;
  }
  return -1;
}

}  // namespace

absl::StatusOr<bool> AddLayerNormPass::Run(PlanState& s) {
  if (!s.options.add_layernorm) return false;
  bool changed = false;
  for (int i = 0; i < s.nn; ++i) {
    if (s.covered(i)) continue;
    const int j = AddLayerNormUser(s, i);
    if (j < 0) continue;
    s.add_layernorm[i] = j;
    s.Cover(j, i);
    changed = true;
  }
  return changed;
}

}  // namespace loom::compiler::cuda::plan_internal
