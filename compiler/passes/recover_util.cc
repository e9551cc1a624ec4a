#include "compiler/passes/recover_util.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace loom::compiler::passes::recover {

GraphIndex::GraphIndex(const ir::Graph& g, const ConstantTable* consts)
    : g_(g),
      consts_(consts),
      producer_(g.values().size(), -1),
      uses_(g.UseCounts()),
      input_of_(g.values().size(), nullptr) {
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].outputs) producer_[v] = static_cast<int>(i);
  for (const ir::GraphInput& in : g.inputs()) input_of_[in.value] = &in;
}

const ir::Node* GraphIndex::Def(int v) const { return producer_[v] < 0 ? nullptr : &g_.nodes()[producer_[v]]; }

const ir::Node* GraphIndex::DefOp(int v, absl::string_view op) const {
  const ir::Node* n = Def(v);
  return n != nullptr && n->op == op && n->outputs.size() == 1 ? n : nullptr;
}

const Tensor* GraphIndex::Constant(int v) const {
  const ir::GraphInput* in = input_of_[v];
  if (consts_ == nullptr || in == nullptr || in->kind != ir::InputKind::kConst) return nullptr;
  auto it = consts_->find(in->name);
  if (it == consts_->end() || !(kernels::MetaOf(it->second) == g_.meta(v))) return nullptr;
  return &it->second;
}

std::optional<double> GraphIndex::Scalar(int v) const {
  const Tensor* t = Constant(v);
  if (t == nullptr || t->numel() != 1) return std::nullopt;
  return t->GetDouble(0);
}

std::string GraphIndex::Name(int v) const {
  return input_of_[v] != nullptr ? absl::StrCat("%", input_of_[v]->name) : g_.meta(v).ToString();
}

std::optional<Operand> AddedScalar(const GraphIndex& idx, const ir::Graph& g, int v) {
  if (const ir::Node* n = idx.DefOp(v, "add_scalar")) return Operand{n->inputs[0], n->attrs.GetFloat("s")};
  const ir::Node* n = idx.DefOp(v, "add");
  if (n == nullptr || n->inputs.size() != 2) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const int u = n->inputs[1 - k];
    std::optional<double> c = idx.Scalar(n->inputs[k]);
    if (c && g.meta(u).shape == g.meta(v).shape) return Operand{u, *c};
  }
  return std::nullopt;
}

std::optional<Operand> ScaledBy(const GraphIndex& idx, const ir::Graph& g, int v) {
  if (const ir::Node* n = idx.DefOp(v, "scale")) return Operand{n->inputs[0], n->attrs.GetFloat("s")};
  if (const ir::Node* n = idx.DefOp(v, "mul"); n != nullptr && n->inputs.size() == 2) {
    for (int k = 0; k < 2; ++k) {
      const int u = n->inputs[1 - k];
      std::optional<double> c = idx.Scalar(n->inputs[k]);
      if (c && g.meta(u).shape == g.meta(v).shape) return Operand{u, *c};
    }
  }
  if (const ir::Node* n = idx.DefOp(v, "div"); n != nullptr && n->inputs.size() == 2) {
    std::optional<double> k = idx.Scalar(n->inputs[1]);
    if (k && *k != 0 && g.meta(n->inputs[0]).shape == g.meta(v).shape) return Operand{n->inputs[0], 1.0 / *k};
  }
  return std::nullopt;
}

std::optional<int> SquareOf(const GraphIndex& idx, int v) {
  if (const ir::Node* n = idx.DefOp(v, "pow_scalar"); n != nullptr && n->attrs.GetFloat("p") == 2.0)
    return n->inputs[0];
  if (const ir::Node* n = idx.DefOp(v, "mul"); n != nullptr && n->inputs.size() == 2 && n->inputs[0] == n->inputs[1])
    return n->inputs[0];
  if (const ir::Node* n = idx.DefOp(v, "pow"); n != nullptr && n->inputs.size() == 2 && idx.Scalar(n->inputs[1]) == 2.0)
    return n->inputs[0];
  return std::nullopt;
}

std::optional<int> InvSqrtOf(const GraphIndex& idx, int v) {
  if (const ir::Node* n = idx.DefOp(v, "rsqrt")) return n->inputs[0];
  int s = -1;
  if (const ir::Node* n = idx.DefOp(v, "reciprocal")) s = n->inputs[0];
  if (const ir::Node* n = idx.DefOp(v, "div"); n != nullptr && n->inputs.size() == 2 && idx.Scalar(n->inputs[0]) == 1.0)
    s = n->inputs[1];
  const ir::Node* sq = s < 0 ? nullptr : idx.DefOp(s, "sqrt");
  if (sq == nullptr || idx.Uses(s) != 1) return std::nullopt;
  return sq->inputs[0];
}

std::optional<std::pair<int, int>> Product(const GraphIndex& idx, int v) {
  const ir::Node* n = idx.DefOp(v, "mul");
  if (n == nullptr || n->inputs.size() != 2) return std::nullopt;
  return std::make_pair(n->inputs[0], n->inputs[1]);
}

bool SameConstant(double got, double want) {
  if (std::isinf(want) || want == 0) return got == want;
  return std::fabs(got - want) <= std::ldexp(std::fabs(want), -20);
}

std::vector<int64_t> ReducedAxes(const ir::Node& n, size_t rank) {
  std::vector<int64_t> axes = n.attrs.GetInts("axes");
  for (int64_t& a : axes)
    if (a < 0) a += static_cast<int64_t>(rank);
  std::sort(axes.begin(), axes.end());
  return axes;
}

void MoveAppended(ir::Graph& g, size_t first_new, int at) {
  std::vector<ir::Node>& nodes = g.mutable_nodes();
  // The new nodes come from the source node they replace.
  if (static_cast<size_t>(at) < first_new)
    for (size_t i = first_new; i < nodes.size(); ++i)
      if (nodes[i].origin.empty()) nodes[i].origin = nodes[at].origin;
  std::rotate(nodes.begin() + at, nodes.begin() + static_cast<std::ptrdiff_t>(first_new), nodes.end());
}

int EraseUnused(ir::Graph& g, const std::vector<int>& values, int at) {
  std::vector<int> uses = g.UseCounts();
  std::vector<int> producer(g.values().size(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (int v : g.nodes()[i].outputs) producer[v] = static_cast<int>(i);
  std::vector<bool> erase(g.nodes().size(), false);
  std::vector<int> work;
  for (int v : values) work.push_back(producer[v]);
  while (!work.empty()) {
    const int i = work.back();
    work.pop_back();
    if (i < 0 || erase[i]) continue;
    bool dead = true;
    for (int v : g.nodes()[i].outputs) dead = dead && uses[v] == 0;
    if (!dead) continue;
    erase[i] = true;
    for (int v : g.nodes()[i].inputs)
      if (--uses[v] == 0) work.push_back(producer[v]);
  }
  int before = 0;
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (erase[i]) {
      before += static_cast<int>(i) < at;
      continue;
    }
    kept.push_back(std::move(g.mutable_nodes()[i]));
  }
  g.mutable_nodes() = std::move(kept);
  return before;
}

int Commit(ir::Graph& g, size_t first_new, int at, int from, int to) {
  MoveAppended(g, first_new, at);
  g.ReplaceAllUses(from, to);
  return at - EraseUnused(g, {from}, at);
}

int AddConstant(ir::Graph& g, ConstantTable& table, const std::string& base, Tensor value) {
  std::string name = base;
  for (int k = 2; g.FindInput(name) >= 0 || table.count(name) > 0; ++k) name = absl::StrCat(base, "#", k);
  const int v = g.AddInput(name, kernels::MetaOf(value), ir::InputKind::kConst);
  table[name] = std::move(value);
  return v;
}

}  // namespace loom::compiler::passes::recover
