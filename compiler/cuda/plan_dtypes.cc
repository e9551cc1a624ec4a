// The mixed-precision storage policy (StorageDTypes, see plan.h) and the
// storage_dtypes pass (plan_dtypes.h).
#include "compiler/cuda/plan_dtypes.h"

#include <string>
#include <vector>

namespace loom::compiler::cuda {

std::vector<DType> StorageDTypes(const ir::Graph& g, bool bf16, const MemoryPolicy& memory) {
  const size_t nv = g.values().size();
  std::vector<DType> st(nv);
  for (size_t v = 0; v < nv; ++v) st[v] = g.meta(v).dtype;
  if (!bf16) return st;
  // Parameter gradients: adamw's grad operand, and what sums into it or
  // reaches it unchanged (adds, the gradient collectives of a parallel
  // program, reshapes, slices and concats of gradient buckets).
  const std::vector<int> prod = plan_internal::Producers(g);
  // state: AdamW's m and v and their updates, bf16 under the memory policy.
  std::vector<bool> pgrad(nv, false), master(nv, false), state(nv, false);
  std::vector<int> work;
  for (const ir::Node& n : g.nodes())
    if (n.op == "adamw" && n.inputs.size() > 3) {
      master[n.inputs[0]] = true;  // param, m, v (or this rank's shards of them)
      for (int k : {2, 3}) (memory.bf16_adam_states ? state : master)[n.inputs[k]] = true;
      if (memory.bf16_adam_states)
        for (size_t k = 1; k < n.outputs.size() && k < 3; ++k) state[n.outputs[k]] = true;
      if (pgrad[n.inputs[1]]) continue;
      pgrad[n.inputs[1]] = true;
      work.push_back(n.inputs[1]);
    }
  // An output written back into an input keeps the input's dtype (ZeRO:
  // the all_gather of updated shards into the f32 parameter).
  for (const ir::GraphOutput& o : g.outputs())
    if (o.updates >= 0) (state[g.inputs()[o.updates].value] ? state : master)[o.value] = true;
  for (const ir::GraphInput& in : g.inputs())
    if (state[in.value] && g.meta(in.value).dtype == DType::kF32) st[in.value] = DType::kBF16;
  while (!work.empty()) {
    int v = work.back();
    work.pop_back();
    if (prod[v] < 0) continue;
    const ir::Node& n = g.nodes()[prod[v]];
    if (n.op != "add" && n.op != "all_reduce" && n.op != "reduce_scatter" && n.op != "reshape" && n.op != "slice" &&
        n.op != "concat")
      continue;
    for (int u : n.inputs)
      if (!pgrad[u] && IsFloating(g.meta(u).dtype) && prod[u] >= 0) {
        pgrad[u] = true;
        work.push_back(u);
      }
  }
  for (const ir::Node& n : g.nodes()) {
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int v = n.outputs[k];
      const ir::TensorMeta& m = g.meta(v);
      if (m.dtype != DType::kF32) continue;  // integers, f64, already 16-bit: unchanged
      if (state[v]) {
        st[v] = DType::kBF16;
        continue;
      }
      // Data movement keeps its operand's dtype: reshape, and a parallel
      // program's gather of shards (ZeRO-3's f32 parameters stay f32 for
      // the norms that read them; a GEMM casts its copy).
      if (n.op == "reshape" || n.op == "all_gather" || n.op == "shard_slice") {
        st[v] = st[n.inputs[0]];
        continue;
      }
      const std::string& op = n.op;
      const bool keep32 =
          m.shape.empty() || (pgrad[v] && !memory.bf16_param_grads) || master[v] || op == "grad_norm" || op == "adamw" || op == "sum" || op == "max" || op == "embedding_backward" ||
          op == "cross_entropy" || ((op == "layernorm" || op == "rmsnorm") && k > 0) ||
          (op == "sdpa" && k == 1) || ((op == "layernorm_backward" || op == "rmsnorm_backward") && k > 0);
      st[v] = keep32 ? DType::kF32 : DType::kBF16;
    }
  }
  return st;
}

}  // namespace loom::compiler::cuda

namespace loom::compiler::cuda::plan_internal {

absl::StatusOr<bool> StorageDTypesPass::Run(PlanState& s) {
  const MemoryPolicy& mem = s.options.memory;
  if ((mem.bf16_param_grads || mem.bf16_adam_states || mem.split_master) && !s.p.bf16)
    return absl::InvalidArgumentError("memory policy: bf16 gradients, states or split parameters need a bf16 plan");
  if (mem.bf16_adam_states)
    for (size_t i = 0; i < s.g.nodes().size(); ++i) {
      const ir::Node& n = s.g.nodes()[i];
      if (n.op == "adamw" && n.inputs.size() > 3 && (s.prod[n.inputs[2]] >= 0 || s.prod[n.inputs[3]] >= 0))
        return Unsupported(s.g, static_cast<int>(i),
                           "bf16 AdamW states need m and v as graph inputs (not shards of them: ZeRO)");
    }
  s.st = StorageDTypes(s.g, s.p.bf16, mem);
  s.p.metas.clear();
  for (size_t v = 0; v < s.st.size(); ++v) s.p.metas.push_back({s.st[v], s.g.meta(v).shape});
  s.attn_views = s.options.attn_views && s.p.bf16;
  return s.p.bf16;  // f32: every value keeps its graph dtype
}

}  // namespace loom::compiler::cuda::plan_internal
