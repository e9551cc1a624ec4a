// The mixed-precision storage policy (StorageDTypes, see plan.h) and the
// graph's producer / user tables that the planner passes share.
#include <string>
#include <vector>

#include "compiler/cuda/plan.h"
#include "compiler/cuda/plan_internal.h"

namespace loom::compiler::cuda::plan_internal {

std::vector<int> Producers(const Graph& g) {
  std::vector<int> prod(g.values().size(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].outputs) prod[v] = static_cast<int>(i);
  return prod;
}

std::vector<std::vector<int>> Users(const Graph& g) {
  std::vector<std::vector<int>> users(g.values().size());
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].inputs) {
      auto& u = users[v];
      if (u.empty() || u.back() != static_cast<int>(i)) u.push_back(static_cast<int>(i));
    }
  return users;
}

}  // namespace loom::compiler::cuda::plan_internal

namespace loom::compiler::cuda {

using plan_internal::Producers;

std::vector<DType> StorageDTypes(const Graph& g, bool bf16) {
  const size_t nv = g.values().size();
  std::vector<DType> st(nv);
  for (size_t v = 0; v < nv; ++v) st[v] = g.meta(v).dtype;
  if (!bf16) return st;
  // Parameter gradients: adamw's grad operand, and (through adds) what sums into it.
  const std::vector<int> prod = Producers(g);
  std::vector<bool> pgrad(nv, false);
  std::vector<int> work;
  for (const Node& n : g.nodes())
    if (n.op == "adamw" && n.inputs.size() > 1 && !pgrad[n.inputs[1]]) {
      pgrad[n.inputs[1]] = true;
      work.push_back(n.inputs[1]);
    }
  while (!work.empty()) {
    int v = work.back();
    work.pop_back();
    if (prod[v] < 0) continue;
    const Node& n = g.nodes()[prod[v]];
    if (n.op != "add") continue;
    for (int u : n.inputs)
      if (!pgrad[u] && IsFloating(g.meta(u).dtype) && prod[u] >= 0) {
        pgrad[u] = true;
        work.push_back(u);
      }
  }
  for (const Node& n : g.nodes()) {
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int v = n.outputs[k];
      const TensorMeta& m = g.meta(v);
      if (m.dtype != DType::kF32) continue;  // integers, f64, already 16-bit: unchanged
      if (n.op == "reshape") {
        st[v] = st[n.inputs[0]];
        continue;
      }
      const std::string& op = n.op;
      const bool keep32 =
          m.shape.empty() || pgrad[v] || op == "grad_norm" || op == "adamw" || op == "embedding_backward" ||
          op == "cross_entropy" || ((op == "layernorm" || op == "rmsnorm") && k > 0) ||
          (op == "sdpa" && k == 1) || ((op == "layernorm_backward" || op == "rmsnorm_backward") && k > 0);
      st[v] = keep32 ? DType::kF32 : DType::kBF16;
    }
  }
  return st;
}

}  // namespace loom::compiler::cuda
