// PlanState (plan_state.h): the graph facts every pass reads, the plan-value
// helpers lower_nodes uses (new values, casts and bf16 shadows), and the
// small shared functions.
#include "compiler/cuda/plan_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace loom::compiler::cuda::plan_internal {

std::vector<int> Producers(const ir::Graph& g) {
  std::vector<int> prod(g.values().size(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].outputs) prod[v] = static_cast<int>(i);
  return prod;
}

std::vector<std::vector<int>> Users(const ir::Graph& g) {
  std::vector<std::vector<int>> users(g.values().size());
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].inputs) {
      auto& u = users[v];
      if (u.empty() || u.back() != static_cast<int>(i)) u.push_back(static_cast<int>(i));
    }
  return users;
}

std::vector<int64_t> Contig(absl::Span<const int64_t> shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

int64_t NormAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

absl::Status Unsupported(const ir::Graph& g, int node, absl::string_view why) {
  const ir::Node& n = g.nodes()[node];
  std::string where = absl::StrCat("node ", node);
  if (!n.origin.empty()) absl::StrAppend(&where, ", from ", n.origin);
  return absl::UnimplementedError(absl::StrCat("cuda lowering: op '", n.op, "' (", where, "): ", why));
}

PlanState::PlanState(const ir::Graph& graph, bool bf16, const PlanOptions& opts) : g(graph), options(opts) {
  p.bf16 = bf16;
  const int nv = static_cast<int>(g.values().size());
  p.root.assign(nv, -1);
  p.input_of.assign(nv, -1);
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const int v = g.inputs()[k].value;
    p.root[v] = v;
    p.input_of[v] = static_cast<int>(k);
  }
  p.shadow.assign(g.inputs().size(), -1);
  p.split.assign(g.inputs().size(), false);
  is_shadow.assign(nv, false);
  prod = Producers(g);
  users = Users(g);
  is_output.assign(nv, false);
  for (const ir::GraphOutput& o : g.outputs()) is_output[o.value] = true;
  nn = static_cast<int>(g.nodes().size());
  covered_by.assign(nn, -1);
  virtual_value.assign(nv, false);
  cdt = bf16 ? DType::kBF16 : DType::kF32;
}

int PlanState::new_value(ir::TensorMeta m) {
  const int id = static_cast<int>(p.metas.size());
  p.metas.push_back(std::move(m));
  p.root.push_back(id);
  p.input_of.push_back(-1);
  is_shadow.push_back(false);
  return id;
}

// The bf16 copy of f32 value v (or of the value v reshapes) that the launch
// writing it adds as an output (bf16_copy_at), or -1: no such launch, or a
// later launch wrote v's buffer again.
int PlanState::bf16_copy_of(int v) {
  const int r = p.root[v];
  auto at = r < 0 ? bf16_copy_at.end() : bf16_copy_at.find(r);
  if (at == bf16_copy_at.end() || NumElements(p.metas[v].shape) != NumElements(p.metas[r].shape)) return -1;
  for (size_t pos = at->second + 1; pos < p.launches.size(); ++pos)
    for (int o : p.launches[pos].outputs)
      if (o == r || p.root[o] == r) return -1;
  auto [it, added] = bf16_copy.try_emplace(r, -1);
  if (added) {
    it->second = new_value({DType::kBF16, p.metas[r].shape});
    p.launches[at->second].outputs.push_back(it->second);
  }
  if (v == r) return it->second;
  const int view = new_value({DType::kBF16, p.metas[v].shape});  // v's shape over the copy's bytes
  p.root[view] = it->second;
  return view;
}

// `v` in storage dtype `dt`: itself, a param's bf16 shadow, the bf16 copy
// its launch writes, or a cast.
int PlanState::want(int v, DType dt) {
  if (p.metas[v].dtype == dt) return v;
  if (dt == DType::kBF16 && p.metas[v].dtype == DType::kF32)
    if (const int c = bf16_copy_of(v); c >= 0) return c;
  const int k = p.input_of[v];
  if (k >= 0 && p.root[v] == g.inputs()[k].value && g.inputs()[k].kind == ir::InputKind::kParam && dt == DType::kBF16 &&
      p.metas[v].dtype == DType::kF32 && v == g.inputs()[k].value) {
    if (p.shadow[k] < 0) {
      p.shadow[k] = new_value({DType::kBF16, p.metas[v].shape});
      is_shadow[p.shadow[k]] = true;
    }
    return p.shadow[k];
  }
  const int t = new_value({dt, p.metas[v].shape});
  Launch c;
  c.kind = LaunchKind::kCopy;
  c.op = "cast";
  c.inputs = {v};
  c.outputs = {t};
  c.copies = {CopyGeom{p.metas[v].shape, 0, Contig(p.metas[v].shape), 0, {}}};
  p.launches.push_back(std::move(c));
  return t;
}

int PlanState::single_user(int v) const {
  if (is_output[v] || users[v].size() != 1) return -1;
  const ir::Node& u = g.nodes()[users[v][0]];
  int uses = 0;
  for (int x : u.inputs) uses += x == v;
  return uses == 1 ? users[v][0] : -1;
}

}  // namespace loom::compiler::cuda::plan_internal
