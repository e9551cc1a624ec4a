#include "compiler/passes/recover_norms.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::passes {
namespace {

using recover::GraphIndex;

// A matched norm: the fused op's inputs and eps, the value it replaces, and
// values of the decomposed form (LayerNorm counts d's uses among them).
struct NormMatch {
  std::string op;
  std::vector<int> inputs;  // x, w [, b]
  double eps = 0;
  int root = -1;
  std::set<int> interior;
};

// mean(u){axes=[last], keepdim=true} of value v (its operand, or -1).
int LastAxisMean(const GraphIndex& idx, const ir::Graph& g, int v) {
  const ir::Node* n = idx.DefOp(v, "mean");
  if (n == nullptr) return -1;
  const Shape& in = g.meta(n->inputs[0]).shape;
  if (in.empty() || !n->attrs.GetBool("keepdim", false)) return -1;
  if (recover::ReducedAxes(*n, in.size()) != std::vector<int64_t>{static_cast<int64_t>(in.size()) - 1}) return -1;
  return n->inputs[0];
}

// v = a * b with one operand a [C] vector (the affine weight), C = last dim
// of v: {the other operand, the weight}.
std::optional<std::pair<int, int>> TimesWeight(const GraphIndex& idx, const ir::Graph& g, int v) {
  auto p = recover::Product(idx, v);
  if (!p) return std::nullopt;
  const Shape& shape = g.meta(v).shape;
  for (auto [w, other] : {*p, std::make_pair(p->second, p->first)})
    if (!shape.empty() && g.meta(w).shape == Shape{shape.back()} && g.meta(other).shape == shape)
      return std::make_pair(other, w);
  return std::nullopt;
}

// e = mean(sq) + eps with sq the square of x: eps, or nullopt. Adds the
// interior values (e's producers down to sq) to m.
std::optional<double> MeanSquarePlusEps(const GraphIndex& idx, const ir::Graph& g, int e, int x, NormMatch& m) {
  auto added = recover::AddedScalar(idx, g, e);
  if (!added || added->c <= 0 || idx.Uses(e) != 1 || idx.Uses(added->value) != 1) return std::nullopt;
  const int sq = LastAxisMean(idx, g, added->value);
  if (sq < 0 || idx.Uses(sq) != 1 || recover::SquareOf(idx, sq) != x) return std::nullopt;
  m.interior.insert({e, added->value, sq});
  return added->c;
}

// n = d * invsqrt(e) | invsqrt(e) * d | d / sqrt(e): e, with n's producers
// (down to e) in m.
int NormalizedBy(const GraphIndex& idx, const ir::Graph& g, int n, int d, NormMatch& m) {
  if (const ir::Node* div = idx.DefOp(n, "div"); div != nullptr && div->inputs.size() == 2 && div->inputs[0] == d) {
    const ir::Node* s = idx.DefOp(div->inputs[1], "sqrt");
    if (s == nullptr || idx.Uses(div->inputs[1]) != 1) return -1;
    m.interior.insert({n, div->inputs[1]});
    return s->inputs[0];
  }
  auto p = recover::Product(idx, n);
  if (!p) return -1;
  const int r = p->first == d ? p->second : p->second == d ? p->first : -1;
  if (r < 0 || r == d || idx.Uses(r) != 1) return -1;
  std::optional<int> e = recover::InvSqrtOf(idx, r);
  if (!e) return -1;
  m.interior.insert({n, r});
  return *e;
}

// LayerNorm rooted at node `root` (the bias add).
std::optional<NormMatch> MatchLayerNorm(const GraphIndex& idx, const ir::Graph& g, const ir::Node& root) {
  if (root.op != "add" || root.inputs.size() != 2 || root.outputs.size() != 1) return std::nullopt;
  const int z = root.outputs[0];
  const Shape& shape = g.meta(z).shape;
  for (int k = 0; k < 2 && !shape.empty(); ++k) {
    const int y = root.inputs[k], b = root.inputs[1 - k];
    if (g.meta(b).shape != Shape{shape.back()} || idx.Uses(y) != 1) continue;
    auto nw = TimesWeight(idx, g, y);
    if (!nw || idx.Uses(nw->first) != 1) continue;
    NormMatch m;
    m.interior = {z, y};
    const ir::Node* sub = nullptr;
    int d = -1;
    // n = d / sqrt(e): find d among n's operands (the one a sub produces).
    if (const ir::Node* nn = idx.Def(nw->first); nn != nullptr)
      for (int cand : nn->inputs)
        if (idx.DefOp(cand, "sub") != nullptr) d = cand;
    if (d < 0 || (sub = idx.DefOp(d, "sub")) == nullptr || sub->inputs.size() != 2) continue;
    const int x = sub->inputs[0];
    const int mean = sub->inputs[1];
    if (LastAxisMean(idx, g, mean) != x || idx.Uses(mean) != 1 || g.meta(x).shape != shape) continue;
    const int e = NormalizedBy(idx, g, nw->first, d, m);
    if (e < 0) continue;
    std::optional<double> eps = MeanSquarePlusEps(idx, g, e, d, m);
    if (!eps) continue;
    // d feeds the square (once, or twice as mul(d, d)) and the normalisation only.
    int inner_uses = 0;
    for (int v : m.interior)
      if (const ir::Node* n = idx.Def(v))
        for (int in : n->inputs) inner_uses += in == d;
    if (idx.Uses(d) != inner_uses) continue;
    m.interior.insert({d, mean});
    m.op = "layernorm";
    m.inputs = {x, nw->second, b};
    m.eps = *eps;
    m.root = z;
    return m;
  }
  return std::nullopt;
}

// RMSNorm rooted at node `root` (the weight multiply).
std::optional<NormMatch> MatchRmsNorm(const GraphIndex& idx, const ir::Graph& g, const ir::Node& root) {
  if (root.op != "mul" || root.outputs.size() != 1) return std::nullopt;
  const int y = root.outputs[0];
  auto nw = TimesWeight(idx, g, y);
  if (!nw || idx.Uses(nw->first) != 1) return std::nullopt;
  const ir::Node* nn = idx.Def(nw->first);
  if (nn == nullptr || nn->inputs.size() != 2) return std::nullopt;
  for (int x : nn->inputs) {
    if (g.meta(x).shape != g.meta(y).shape) continue;
    NormMatch m;
    m.interior = {y};
    const int e = NormalizedBy(idx, g, nw->first, x, m);
    if (e < 0) continue;
    std::optional<double> eps = MeanSquarePlusEps(idx, g, e, x, m);
    if (!eps) continue;
    m.op = "rmsnorm";
    m.inputs = {x, nw->second};
    m.eps = *eps;
    m.root = y;
    return m;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<bool> RecoverNorms::Run(ir::Graph& g) {
  bool changed = false;
  const size_t logged = log_ != nullptr ? log_->size() : 0;
  std::optional<GraphIndex> index;
  for (int i = static_cast<int>(g.nodes().size()) - 1; i >= 0; --i) {
    if (!index) index.emplace(g, consts_);
    const GraphIndex& idx = *index;
    std::optional<NormMatch> m = MatchLayerNorm(idx, g, g.nodes()[i]);
    if (!m) m = MatchRmsNorm(idx, g, g.nodes()[i]);
    if (!m) continue;
    std::vector<ir::TensorMeta> in;
    for (int v : m->inputs) in.push_back(g.meta(v));
    const ir::Attrs attrs{{"eps", m->eps}};
    auto metas = ir::InferOp(m->op, in, attrs, nullptr);
    if (!metas.ok() || !((*metas)[0] == g.meta(m->root))) continue;  // a form the fused op does not take
    if (log_ != nullptr)
      log_->push_back(absl::StrCat(m->op, ": ", idx.Name(m->inputs[1]),
                                   m->inputs.size() > 2 ? absl::StrCat(", ", idx.Name(m->inputs[2])) : "",
                                   ", eps ", m->eps, " over ", g.meta(m->inputs[0]).ToString()));
    const size_t first_new = g.nodes().size();
    LOOM_ASSIGN_OR_RETURN(std::vector<int> outs, g.AddOp(m->op, m->inputs, attrs));
    i = recover::Commit(g, first_new, i, m->root, outs[0]);
    index.reset();  // the graph changed
    changed = true;
  }
  if (log_ != nullptr) std::reverse(log_->begin() + logged, log_->end());  // graph order
  return changed;
}

}  // namespace loom::compiler::passes
