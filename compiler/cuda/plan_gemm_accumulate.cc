// The gemm_accumulate pass (plan_gemm_accumulate.h).
#include "compiler/cuda/plan_gemm_accumulate.h"

#include <algorithm>
#include <vector>

namespace loom::compiler::cuda::plan_internal {

namespace {

// Node i is an add, or a fused node of adds only.
bool IsSum(const ir::Graph& g, const ir::Node& n) {
  if (n.outputs.size() != 1 || n.inputs.size() < 2 || n.inputs.size() > 4) return false;
  if (n.op == "add") return true;
  if (n.op != ir::kFusedOp || !n.subgraph || n.subgraph->outputs().size() != 1) return false;
  for (const ir::Node& b : n.subgraph->nodes())
    if (b.op != "add") return false;
  return true;
}

// The matmul nodes whose plain products the sum node i adds, in graph
// order; empty when the pattern does not hold.
std::vector<int> SummedGemms(const PlanState& s, int i) {
  const ir::Graph& g = s.g;
  const ir::Node& n = g.nodes()[i];
  const int out = n.outputs[0];
  std::vector<int> mms;
  for (int v : n.inputs) {
    const int m = s.prod[v];
    if (m < 0 || s.covered(m) || s.single_user(v) != i) return {};
    auto it = s.gemm.find(m);
    if (it == s.gemm.end()) return {};
    const GemmClaim& c = it->second;
    if (c.nodes.size() != 1 || c.outputs != std::vector<int>{v} || c.gemm.epilogue != GemmEpilogue::kNone ||
        c.gemm.weight_grad)
      return {};
    if (g.meta(v).shape != g.meta(out).shape || s.p.metas[v].dtype != s.p.metas[out].dtype ||
        s.p.metas[out].dtype != s.cdt)
      return {};
    mms.push_back(m);
  }
  std::sort(mms.begin(), mms.end());
  if (std::adjacent_find(mms.begin(), mms.end()) != mms.end()) return {};  // one GEMM summed twice
  return mms;
}

}  // namespace

absl::StatusOr<bool> GemmAccumulatePass::Run(PlanState& s) {
  if (!s.options.accumulate_gemms) return false;
  bool changed = false;
  for (int i = 0; i < s.nn; ++i) {
    const ir::Node& n = s.g.nodes()[i];
    if (s.covered(i) || !IsSum(s.g, n)) continue;
    const std::vector<int> mms = SummedGemms(s, i);
    if (mms.empty()) continue;
    const int out = n.outputs[0];
    for (size_t k = 0; k < mms.size(); ++k) {
      GemmClaim& c = s.gemm.at(mms[k]);
      s.virtual_value[c.outputs[0]] = true;
      c.outputs = {out};
      if (k > 0) {
        c.gemm.accumulate = true;
        c.extra_in = {out};  // read and written: live from the first GEMM on
      }
    }
    GemmClaim& last = s.gemm.at(mms.back());
    last.nodes.push_back(i);
    last.op += "+add";
    s.Cover(i, mms.back());
    changed = true;
  }
  return changed;
}

}  // namespace loom::compiler::cuda::plan_internal
