// The mixed-precision storage policy (StorageDTypes, see plan.h) and the
// storage_dtypes pass (plan_dtypes.h).
#include "compiler/cuda/plan_dtypes.h"

#include <string>
#include <vector>

namespace loom::compiler::cuda {

std::vector<DType> StorageDTypes(const ir::Graph& g, bool bf16) {
  const size_t nv = g.values().size();
  std::vector<DType> st(nv);
  for (size_t v = 0; v < nv; ++v) st[v] = g.meta(v).dtype;
  if (!bf16) return st;
  // Parameter gradients: adamw's grad operand, and what sums into it or
  // reaches it unchanged (adds, the gradient collectives of a parallel
  // program, reshapes, slices and concats of gradient buckets).
  const std::vector<int> prod = plan_internal::Producers(g);
  std::vector<bool> pgrad(nv, false), master(nv, false);
  std::vector<int> work;
  for (const ir::Node& n : g.nodes())
    if (n.op == "adamw" && n.inputs.size() > 3) {
      for (int k : {0, 2, 3}) master[n.inputs[k]] = true;  // param, m, v (or this rank's shards of them)
      if (pgrad[n.inputs[1]]) continue;
      pgrad[n.inputs[1]] = true;
      work.push_back(n.inputs[1]);
    }
  // An output written back into an input keeps the input's dtype (ZeRO:
  // the all_gather of updated shards into the f32 parameter).
  for (const ir::GraphOutput& o : g.outputs())
    if (o.updates >= 0) master[o.value] = true;
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
      // Data movement keeps its operand's dtype: reshape, and a parallel
      // program's gather of shards (ZeRO-3's f32 parameters stay f32 for
      // the norms that read them; a GEMM casts its copy).
      if (n.op == "reshape" || n.op == "all_gather" || n.op == "shard_slice") {
        st[v] = st[n.inputs[0]];
        continue;
      }
      const std::string& op = n.op;
      const bool keep32 =
          m.shape.empty() || pgrad[v] || master[v] || op == "grad_norm" || op == "adamw" || op == "sum" || op == "max" || op == "embedding_backward" ||
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
  s.st = StorageDTypes(s.g, s.p.bf16);
  s.p.metas.clear();
  for (size_t v = 0; v < s.st.size(); ++v) s.p.metas.push_back({s.st[v], s.g.meta(v).shape});
  s.attn_views = s.options.attn_views && s.p.bf16;
  return s.p.bf16;  // f32: every value keeps its graph dtype
}

}  // namespace loom::compiler::cuda::plan_internal
