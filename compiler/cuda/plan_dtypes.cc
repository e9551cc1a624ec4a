// The mixed-precision storage policy (StorageDTypes, see plan.h) and the
// storage_dtypes pass (plan_dtypes.h).
#include "compiler/cuda/plan_dtypes.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace loom::compiler::cuda {
namespace {

// The residual stream and its gradient: f32 under PlanOptions::f32_residual,
// as autocast keeps them (the embedding's f32 output promotes every add).
// Forward: what a norm reads, back through the adds that build it, to the
// embedding lookups; an add's operand made by another op (a GEMM's branch)
// is not the stream. Backward: what embedding_backward reads, back through
// the adds that sum the stream's gradient, to the norm backwards' dx that
// start each term.
std::vector<bool> ResidualStream(const ir::Graph& g, const std::vector<int>& prod) {
  std::vector<bool> stream(g.values().size(), false);
  // An add, or a fused node of adds only (a bias add joined to the residual's), reads as "add".
  auto op_of = [&](int v) -> absl::string_view {
    if (prod[v] < 0) return absl::string_view();
    const ir::Node& n = g.nodes()[prod[v]];
    if (n.op == ir::kFusedOp && n.subgraph && n.subgraph->outputs().size() == 1 &&
        std::all_of(n.subgraph->nodes().begin(), n.subgraph->nodes().end(),
                    [](const ir::Node& b) { return b.op == "add"; }))
      return "add";
    return n.op;
  };
  auto walk = [&](std::vector<int> work, auto joins) {
    while (!work.empty()) {
      const int v = work.back();
      work.pop_back();
      if (stream[v] || !IsFloating(g.meta(v).dtype) || !joins(v)) continue;
      stream[v] = true;
      if (op_of(v) == "add")
        for (int u : g.nodes()[prod[v]].inputs) work.push_back(u);
    }
  };
  std::vector<int> fwd, bwd;
  for (const ir::Node& n : g.nodes()) {
    if (n.op == "rmsnorm" || n.op == "layernorm") fwd.push_back(n.inputs[0]);
    if (n.op == "embedding_backward") bwd.push_back(n.inputs[0]);
  }
  walk(fwd, [&](int v) { return op_of(v) == "add" || op_of(v) == "embedding"; });
  walk(bwd, [&](int v) {
    const absl::string_view op = op_of(v);
    return op == "add" ||
           ((op == "rmsnorm_backward" || op == "layernorm_backward") && g.nodes()[prod[v]].outputs[0] == v);
  });
  return stream;
}

}  // namespace

std::vector<DType> StorageDTypes(const ir::Graph& g, bool bf16, const MemoryPolicy& memory, bool f32_residual) {
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
  const std::vector<bool> stream = f32_residual ? ResidualStream(g, prod) : std::vector<bool>(nv, false);
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
      // A parameter gradient summed from an f32 addend (a tied embedding's
      // lookup gradient) stays f32 under bf16 gradients, as autocast's f32
      // .grad accumulation keeps it.
      bool f32_addend = false;
      if (pgrad[v] && op == "add")
        for (int u : n.inputs) f32_addend = f32_addend || st[u] == DType::kF32;
      const bool keep32 =
          m.shape.empty() || stream[v] || (pgrad[v] && (!memory.bf16_param_grads || f32_addend)) || master[v] ||
          op == "grad_norm" || op == "adamw" || op == "sum" || op == "max" || op == "embedding_backward" ||
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
  s.st = StorageDTypes(s.g, s.p.bf16, mem, s.options.f32_residual);
  s.p.metas.clear();
  for (size_t v = 0; v < s.st.size(); ++v) s.p.metas.push_back({s.st[v], s.g.meta(v).shape});
  s.attn_views = s.options.attn_views && s.p.bf16;
  return s.p.bf16;  // f32: every value keeps its graph dtype
}

}  // namespace loom::compiler::cuda::plan_internal
