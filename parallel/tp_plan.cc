#include "parallel/tp_plan.h"

#include <fnmatch.h>

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace loom::parallel {
namespace {

using compiler::ir::Graph;
using compiler::ir::InputKind;
using compiler::ir::Node;
using dtensor::Placement;

// Who reads and who produces each value.
struct Dataflow {
  std::vector<std::vector<std::pair<int, int>>> readers;  // (node, operand)
  std::vector<int> producer;                              // node, or -1 for graph inputs
  explicit Dataflow(const Graph& g) : readers(g.values().size()), producer(g.values().size(), -1) {
    for (int i = 0; i < static_cast<int>(g.nodes().size()); ++i) {
      const Node& n = g.nodes()[i];
      for (size_t k = 0; k < n.inputs.size(); ++k) readers[n.inputs[k]].push_back({i, static_cast<int>(k)});
      for (int v : n.outputs) producer[v] = i;
    }
  }
};

// Ops a weight passes through unchanged but for its dim order.
bool IsView(absl::string_view op) { return op == "permute" || op == "cast"; }

// One op reading a parameter (through views): which of the parameter's dims
// hold the op's output features and its input features (-1: none).
struct FeatureUse {
  int node = -1;
  std::string op;
  bool lookup = false;  // an embedding / gather table
  int out_dim = -1, in_dim = -1;
};

// The uses of value v, whose dim i is dim map[i] of the parameter.
void CollectUses(const Graph& g, const Dataflow& df, int v, const std::vector<int>& map, std::vector<FeatureUse>* uses) {
  for (const auto& [node, k] : df.readers[v]) {
    const Node& n = g.nodes()[node];
    FeatureUse u{node, n.op, false, -1, -1};
    const int nd = static_cast<int>(map.size());
    if (n.op == "cast") {
      CollectUses(g, df, n.outputs[0], map, uses);
      continue;
    }
    if (n.op == "permute") {
      std::vector<int> next;
      for (int64_t d : n.attrs.GetInts("dims")) next.push_back(map[static_cast<int>(d < 0 ? d + nd : d)]);
      CollectUses(g, df, n.outputs[0], next, uses);
      continue;
    }
    if (n.op == "matmul" && nd >= 2) {
      const bool t = n.attrs.GetBool(k == 0 ? "trans_a" : "trans_b");
      // b [.., K, N] (trans: [.., N, K]); a [.., M, K] (trans: [.., K, M]).
      const int last = nd - 1, second = nd - 2;
      const int out = k == 1 ? (t ? second : last) : (t ? last : second);
      const int in = k == 1 ? (t ? last : second) : (t ? second : last);
      u.out_dim = map[out];
      u.in_dim = map[in];
    } else if ((n.op == "embedding" || n.op == "gather") && k == 0 && nd == 2) {
      const int axis = n.op == "gather" ? static_cast<int>((n.attrs.GetInt("axis") + 2) % 2) : 0;
      u.lookup = true;
      u.in_dim = map[axis];
      u.out_dim = map[1 - axis];
    }
    uses->push_back(u);
  }
}

std::vector<FeatureUse> UsesOf(const Graph& g, const Dataflow& df, int value) {
  std::vector<int> map(g.meta(value).shape.size());
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int>(i);
  std::vector<FeatureUse> uses;
  CollectUses(g, df, value, map, &uses);
  return uses;
}

std::string Where(const FeatureUse& u) { return absl::StrCat("'", u.op, "' (node ", u.node, ")"); }

// The tp placement `style` gives parameter `name` (value `value`).
absl::StatusOr<Placement> PlacementOf(const Graph& g, const Dataflow& df, int value, const std::string& name,
                                      const std::string& style, const std::string& pattern, int tp) {
  const Shape& shape = g.meta(value).shape;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.tp_plan: parameter '", name, "' ", ShapeToString(shape),
                                                   " (", style, pattern.empty() ? "" : absl::StrCat(", rule '", pattern, "'"),
                                                   "): ", why));
  };
  if (style == "replicate") return Placement::Replicate();
  if (shape.empty()) return bad("a scalar cannot be sharded");
  int dim = -1;
  if (shape.size() == 1) {
    if (style == "vocab") return bad("vocab shards a 2-D table read by an embedding lookup");
    if (style == "rowwise") return Placement::Replicate();  // a bias has no input features
    dim = 0;
  } else {
    const std::vector<FeatureUse> uses = UsesOf(g, df, value);
    if (uses.empty()) return bad("no op of the forward graph reads it");
    bool lookup = false;
    for (const FeatureUse& u : uses) {
      if (u.out_dim < 0 && u.in_dim < 0)
        return bad(absl::StrCat(Where(u), " reads it; only matmul / Gemm (through Transpose), embedding and gather "
                                "give colwise, rowwise and vocab a meaning (`loom compile JOB.yaml --dump=initial` "
                                "numbers the nodes)"));
      lookup |= u.lookup;
    }
    if (style == "vocab" && !lookup)
      return bad("vocab shards a table read by an embedding lookup (Gather) and no lookup reads this one; "
                 "for an output projection, colwise shards its vocabulary");
    const FeatureUse* first = nullptr;
    for (const FeatureUse& u : uses) {
      const int d = style == "colwise" ? u.out_dim : style == "rowwise" ? u.in_dim : u.lookup ? u.in_dim : u.out_dim;
      if (first == nullptr) {
        first = &u;
        dim = d;
      } else if (d != dim) {
        return bad(absl::StrCat(Where(*first), " would shard dim ", dim, " but ", Where(u), " dim ", d,
                                "; a table both looked up and used as the output head (tied weights) takes vocab"));
      }
    }
  }
  if (shape[dim] % tp != 0 || shape[dim] < tp)
    return bad(absl::StrCat("dim ", dim, " (", shape[dim], ") does not split evenly over tp = ", tp));
  return Placement::Shard(dim);
}

bool Matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::string EscapeGlob(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// "h.0.attn.qkv.weight" -> "h.*.attn.qkv.weight" (literal parts escaped).
std::string FamilyPattern(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  for (std::string& p : parts)
    p = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return absl::ascii_isdigit(c); }) ? "*"
                                                                                                     : EscapeGlob(p);
  return absl::StrJoin(parts, ".");
}

// The weight matmuls of the forward graph: node -> parameter input value.
std::map<int, int> WeightMatmuls(const Graph& g, const Dataflow& df) {
  std::map<int, int> out;
  for (const auto& in : g.inputs()) {
    if (in.kind != InputKind::kParam || g.meta(in.value).shape.size() < 2) continue;
    for (const FeatureUse& u : UsesOf(g, df, in.value))
      if (u.op == "matmul") out[u.node] = in.value;
  }
  return out;
}

// Whether activation v comes, within its block, from another weight matmul:
// a walk up its producers that stops at normalisations, lookups and graph
// inputs.
bool AfterWeightMatmul(const Graph& g, const Dataflow& df, const std::map<int, int>& weight_mm, int v) {
  std::vector<int> stack{v};
  std::set<int> seen;
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    if (!seen.insert(u).second) continue;
    const int p = df.producer[u];
    if (p < 0) continue;
    const Node& n = g.nodes()[p];
    if (n.op == "layernorm" || n.op == "rmsnorm" || n.op == "embedding" || n.op == "gather") continue;
    if (weight_mm.count(p)) return true;
    for (int in : n.inputs) stack.push_back(in);
  }
  return false;
}

// The proposal's style for a 2-D (or larger) parameter.
std::string ProposeMatrixStyle(const Graph& g, const Dataflow& df, const std::map<int, int>& weight_mm, int value) {
  std::set<std::string> styles;
  for (const FeatureUse& u : UsesOf(g, df, value)) {
    if (u.op == "embedding") {
      styles.insert("vocab");
    } else if (u.op == "matmul") {
      const Node& n = g.nodes()[u.node];
      // The activation is the operand that is not (a view of) this parameter.
      int act = -1;
      for (int in : n.inputs) {
        int w = in;
        while (df.producer[w] >= 0 && IsView(g.nodes()[df.producer[w]].op)) w = g.nodes()[df.producer[w]].inputs[0];
        if (w != value) act = in;
      }
      if (act < 0) return "replicate";
      styles.insert(AfterWeightMatmul(g, df, weight_mm, act) ? "rowwise" : "colwise");
    } else {
      return "replicate";
    }
  }
  if (styles.count("vocab")) return "vocab";  // a tied head follows its table
  return styles.size() == 1 ? *styles.begin() : "replicate";
}

// A bias added (directly) to the product of a colwise or vocab weight.
bool BiasOfSharded(const Graph& g, const Dataflow& df, const std::map<int, int>& weight_mm,
                   const std::map<int, std::string>& style_of, int value) {
  for (const auto& [node, k] : df.readers[value]) {
    const Node& n = g.nodes()[node];
    if (n.op != "add" || n.inputs.size() != 2) return false;
    const int p = df.producer[n.inputs[1 - k]];
    auto w = weight_mm.find(p);
    if (p < 0 || w == weight_mm.end()) return false;
    const std::string& s = style_of.at(w->second);
    if (s != "colwise" && s != "vocab") return false;
  }
  return !df.readers[value].empty();
}

}  // namespace

absl::StatusOr<std::vector<TpAssignment>> ResolveTpPlan(const Graph& forward, const std::vector<TpRule>& plan, int tp) {
  const Dataflow df(forward);
  std::vector<TpAssignment> out;
  std::vector<int> matched(plan.size(), 0), taken(plan.size(), 0);
  for (const auto& in : forward.inputs()) {
    if (in.kind != InputKind::kParam) continue;
    TpAssignment a;
    a.param = in.name;
    a.shape = forward.meta(in.value).shape;
    bool found = false;
    for (size_t r = 0; r < plan.size(); ++r) {
      if (!Matches(plan[r].pattern, in.name)) continue;
      ++matched[r];
      if (found) continue;
      found = true;
      ++taken[r];
      a.style = plan[r].style;
      a.pattern = plan[r].pattern;
    }
    if (tp > 1) {
      LOOM_ASSIGN_OR_RETURN(a.placement, PlacementOf(forward, df, in.value, a.param, a.style, a.pattern, tp));
    }
    out.push_back(std::move(a));
  }
  for (size_t r = 0; r < plan.size(); ++r) {
    if (matched[r] == 0) {
      std::vector<std::string> some;
      for (size_t i = 0; i < out.size() && i < 4; ++i) some.push_back(out[i].param);
      return absl::InvalidArgumentError(absl::StrCat("parallel.tp_plan: pattern '", plan[r].pattern,
                                                     "' matches no parameter of the model (its parameters: ",
                                                     absl::StrJoin(some, ", "), out.size() > 4 ? ", ..." : "",
                                                     "; `loom inspect MODEL.onnx` lists them all)"));
    }
    if (taken[r] == 0)
      return absl::InvalidArgumentError(absl::StrCat("parallel.tp_plan: pattern '", plan[r].pattern, "' never applies: ",
                                                     "every parameter it matches takes an earlier rule"));
  }
  return out;
}

absl::Status CheckTpPlanHonoured(const Graph& joint, const compiler::spmd::SpmdStats& stats, int tp_dim,
                                 const std::vector<TpAssignment>& plan, std::string* param) {
  std::map<std::string, const TpAssignment*> sharded;
  for (const TpAssignment& a : plan)
    if (a.placement.is_shard()) sharded[a.param] = &a;
  if (sharded.empty()) return absl::OkStatus();
  const Dataflow df(joint);
  std::map<int, std::string> input_name;
  for (const auto& in : joint.inputs()) input_name[in.value] = in.name;
  for (const compiler::spmd::Redistribution& r : stats.redistributions) {
    if (r.mesh_dim != tp_dim || !r.from.is_shard() || r.to == r.from) continue;
    int v = r.value;
    while (df.producer[v] >= 0 && IsView(joint.nodes()[df.producer[v]].op)) v = joint.nodes()[df.producer[v]].inputs[0];
    auto name = input_name.find(v);
    if (name == input_name.end()) continue;
    auto a = sharded.find(name->second);
    if (a == sharded.end()) continue;
    if (param != nullptr) *param = a->first;
    const std::string who =
        r.node < 0 ? std::string("the graph's outputs")
                   : absl::StrCat("'", joint.nodes()[r.node].op, "' (node ", r.node, " of `loom compile JOB.yaml --dump=joint`)");
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.tp_plan: parameter '", a->first, "' ", ShapeToString(a->second->shape), " (", a->second->style,
        a->second->pattern.empty() ? "" : absl::StrCat(", rule '", a->second->pattern, "'"), "): ", who,
        " needs it as ", r.to.ToString(), " over tp, not ", r.from.ToString(),
        ", so it would be all-gathered every step; replicate it or shard it another way"));
  }
  return absl::OkStatus();
}

std::vector<TpAssignment> ProposeTpAssignments(const Graph& forward, int tp) {
  const Dataflow df(forward);
  const std::map<int, int> weight_mm = WeightMatmuls(forward, df);
  std::map<int, std::string> style_of;  // param value -> style
  const int t = std::max(tp, 1);
  auto fits = [&](int value, const std::string& style) { return PlacementOf(forward, df, value, "", style, "", t).ok(); };
  for (const auto& in : forward.inputs()) {
    if (in.kind != InputKind::kParam) continue;
    std::string s = "replicate";
    if (forward.meta(in.value).shape.size() >= 2) s = ProposeMatrixStyle(forward, df, weight_mm, in.value);
    style_of[in.value] = fits(in.value, s) ? s : "replicate";
  }
  for (const auto& in : forward.inputs())
    if (in.kind == InputKind::kParam && forward.meta(in.value).shape.size() == 1 &&
        BiasOfSharded(forward, df, weight_mm, style_of, in.value) && fits(in.value, "colwise"))
      style_of[in.value] = "colwise";
  std::vector<TpAssignment> out;
  for (const auto& in : forward.inputs()) {
    if (in.kind != InputKind::kParam) continue;
    TpAssignment a;
    a.param = in.name;
    a.shape = forward.meta(in.value).shape;
    a.style = style_of[in.value];
    auto p = PlacementOf(forward, df, in.value, a.param, a.style, "", t);
    a.placement = t > 1 && p.ok() ? *p : Placement::Replicate();
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<TpRule> RulesFor(const std::vector<TpAssignment>& a) {
  std::map<std::string, std::set<std::string>> styles_of_family;
  for (const TpAssignment& x : a) styles_of_family[FamilyPattern(x.param)].insert(x.style);
  std::vector<TpRule> rules;
  std::set<std::string> emitted;
  for (const TpAssignment& x : a) {
    if (x.style == "replicate") continue;
    std::string pattern = FamilyPattern(x.param);
    // The family pattern must match exactly its own members, all of one style.
    bool ok = styles_of_family[pattern].size() == 1;
    for (const TpAssignment& y : a)
      ok &= Matches(pattern, y.param) == (FamilyPattern(y.param) == pattern);
    if (!ok) pattern = EscapeGlob(x.param);
    if (emitted.insert(pattern).second) rules.push_back({pattern, x.style});
  }
  return rules;
}

std::string FormatTpAssignments(const std::vector<TpAssignment>& a) {
  std::string s;
  for (const TpAssignment& x : a)
    absl::StrAppendFormat(&s, "  %-36s %-16s %-10s %-5s %s\n", x.param, ShapeToString(x.shape), x.style,
                          x.placement.ToString(), x.pattern.empty() ? "" : absl::StrCat("(rule '", x.pattern, "')"));
  return s;
}

std::string FormatTpRules(const std::vector<TpRule>& rules) {
  std::string s;
  for (const TpRule& r : rules) {
    std::string quoted;
    for (char c : r.pattern) {
      if (c == '\'') quoted.push_back('\'');
      quoted.push_back(c);
    }
    absl::StrAppend(&s, "  '", quoted, "': ", r.style, "\n");
  }
  return s;
}

}  // namespace loom::parallel
