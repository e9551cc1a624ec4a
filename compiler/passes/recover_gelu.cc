#include "compiler/passes/recover_gelu.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::passes {
namespace {

using recover::GraphIndex;
using recover::SameConstant;

// v read as k * factors[0] * factors[1] * ...
struct Flat {
  double k = 1;
  std::vector<int> factors;
};

// Flattens v; below the top, only values with one use are looked through.
void Flatten(const GraphIndex& idx, const ir::Graph& g, int v, bool top, Flat& f) {
  if (!top && idx.Uses(v) != 1) {
    f.factors.push_back(v);
    return;
  }
  if (auto s = recover::ScaledBy(idx, g, v)) {
    f.k *= s->c;
    Flatten(idx, g, s->value, false, f);
    return;
  }
  if (auto p = recover::Product(idx, v); p && g.meta(p->first).shape == g.meta(v).shape &&
                                         g.meta(p->second).shape == g.meta(v).shape) {
    Flatten(idx, g, p->first, false, f);
    Flatten(idx, g, p->second, false, f);
    return;
  }
  const ir::Node* pw = idx.DefOp(v, "pow_scalar");
  const double p = pw != nullptr ? pw->attrs.GetFloat("p") : 0;
  if (p == 2.0 || p == 3.0) {
    for (int i = 0; i < static_cast<int>(p); ++i) f.factors.push_back(pw->inputs[0]);
    return;
  }
  f.factors.push_back(v);
}

// v = k * x (one factor, x itself) with k the wanted constant.
bool IsScaledX(const GraphIndex& idx, const ir::Graph& g, int v, int x, double k) {
  if (idx.Uses(v) != 1) return false;
  Flat f;
  Flatten(idx, g, v, false, f);
  if (f.factors != std::vector<int>{x} || !SameConstant(f.k, k)) return false;
  return true;
}

// The tanh argument: sqrt(2/pi) * (x + 0.044715 * x^3).
bool IsTanhArg(const GraphIndex& idx, const ir::Graph& g, int u, int x) {
  if (idx.Uses(u) != 1) return false;
  Flat outer;
  Flatten(idx, g, u, false, outer);
  if (outer.factors.size() != 1 || !SameConstant(outer.k, std::sqrt(2.0 / M_PI))) return false;
  const int a = outer.factors[0];
  const ir::Node* add = idx.DefOp(a, "add");
  if (add == nullptr || idx.Uses(a) != 1 || add->inputs.size() != 2) return false;
  for (int k = 0; k < 2; ++k) {
    if (add->inputs[k] != x || add->inputs[1 - k] == x || idx.Uses(add->inputs[1 - k]) != 1) continue;
    Flat cubic;
    Flatten(idx, g, add->inputs[1 - k], false, cubic);
    if (cubic.factors != std::vector<int>{x, x, x} || !SameConstant(cubic.k, 0.044715)) continue;
    return true;
  }
  return false;
}

// t = 1 + erf(x / sqrt(2)) or 1 + tanh(...): "none" or "tanh", "" otherwise.
std::string OnePlusGate(const GraphIndex& idx, const ir::Graph& g, int t, int x) {
  auto added = recover::AddedScalar(idx, g, t);
  if (idx.Uses(t) != 1 || !added || added->c != 1.0 || idx.Uses(added->value) != 1) return "";
  const ir::Node* gate = idx.Def(added->value);
  if (gate == nullptr || gate->outputs.size() != 1) return "";
  if (gate->op == "erf" && IsScaledX(idx, g, gate->inputs[0], x, 1.0 / std::sqrt(2.0))) {
    return "none";
  }
  if (gate->op == "tanh" && IsTanhArg(idx, g, gate->inputs[0], x)) {
    return "tanh";
  }
  return "";
}

struct GeluMatch {
  int x = -1;
  std::string approximate;
};

std::optional<GeluMatch> MatchGelu(const GraphIndex& idx, const ir::Graph& g, const ir::Node& root) {
  if ((root.op != "mul" && root.op != "scale" && root.op != "div") || root.outputs.size() != 1) return std::nullopt;
  Flat f;
  Flatten(idx, g, root.outputs[0], true, f);
  if (f.factors.size() != 2 || f.k != 0.5) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    GeluMatch m;
    m.x = f.factors[k];
    m.approximate = OnePlusGate(idx, g, f.factors[1 - k], m.x);
    if (m.approximate.empty() || g.meta(m.x).shape != g.meta(root.outputs[0]).shape) continue;
    return m;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<bool> RecoverGelu::Run(ir::Graph& g) {
  bool changed = false;
  const size_t logged = log_ != nullptr ? log_->size() : 0;
  std::optional<GraphIndex> index;
  for (int i = static_cast<int>(g.nodes().size()) - 1; i >= 0; --i) {
    if (!index) index.emplace(g, consts_);
    std::optional<GeluMatch> m = MatchGelu(*index, g, g.nodes()[i]);
    if (!m || !IsFloating(g.meta(m->x).dtype)) continue;
    const int root = g.nodes()[i].outputs[0];
    const size_t first_new = g.nodes().size();
    LOOM_ASSIGN_OR_RETURN(int y, g.AddOp1("gelu", {m->x}, ir::Attrs{{"approximate", m->approximate}}));
    if (!(g.meta(y) == g.meta(root))) return absl::InternalError("recover-gelu: the result's type changed");
    if (log_ != nullptr)
      log_->push_back(absl::StrCat("gelu: ", m->approximate == "tanh" ? "tanh" : "erf", " form -> gelu{approximate=",
                                   m->approximate, "} over ", g.meta(m->x).ToString()));
    i = recover::Commit(g, first_new, i, root, y);
    index.reset();
    changed = true;
  }
  if (log_ != nullptr) std::reverse(log_->begin() + logged, log_->end());  // graph order
  return changed;
}

}  // namespace loom::compiler::passes
