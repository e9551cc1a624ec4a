#include "compiler/ir/verifier.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::ir {

namespace {
// Shapes must be non-negative and small enough that byte counts fit easily.
absl::Status CheckMeta(const TensorMeta& m) {
  int64_t n = 1;
  for (int64_t d : m.shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(m.ToString(), ": negative dimension"));
    if (d > 0 && n > (int64_t{1} << 48) / d)
      return absl::InvalidArgumentError(absl::StrCat(m.ToString(), ": more than 2^48 elements"));
    n *= d;
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Verify(const Graph& g) {
  const std::string where = absl::StrCat("graph @", g.name());
  const int nv = static_cast<int>(g.values().size());
  std::vector<bool> defined(nv, false);
  std::set<std::string> names;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const GraphInput& in = g.inputs()[i];
    if (in.name.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": input ", i, " has no name"));
    if (!names.insert(in.name).second)
      return absl::InvalidArgumentError(absl::StrCat(where, ": duplicate input name %", in.name));
    if (in.value < 0 || in.value >= nv || defined[in.value])
      return absl::InvalidArgumentError(absl::StrCat(where, ": input %", in.name, " has a bad value id"));
    defined[in.value] = true;
    LOOM_RETURN_IF_ERROR(Annotate(CheckMeta(g.meta(in.value)), absl::StrCat(where, ": input %", in.name)));
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    const std::string at = absl::StrCat(where, ": node ", i, " (", n.op, ")");
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int v = n.inputs[k];
      if (v < 0 || v >= nv || !defined[v])
        return absl::InvalidArgumentError(absl::StrCat(at, ": input ", k, " is used before it is defined"));
    }
    if (n.op == kFusedOp) {
      if (!n.subgraph) return absl::InvalidArgumentError(absl::StrCat(at, ": fused node without a subgraph"));
      absl::Status s = Verify(*n.subgraph);
      if (!s.ok()) return Annotate(s, at);
    }
    auto metas = InferNode(g, n);
    if (!metas.ok()) return Annotate(metas.status(), at);
    if (metas->size() != n.outputs.size())
      return absl::InvalidArgumentError(absl::StrCat(at, ": has ", n.outputs.size(), " outputs, inference gives ",
                                                     metas->size()));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      int v = n.outputs[k];
      if (v < 0 || v >= nv || defined[v])
        return absl::InvalidArgumentError(absl::StrCat(at, ": output ", k, " is defined twice"));
      defined[v] = true;
      LOOM_RETURN_IF_ERROR(Annotate(CheckMeta(g.meta(v)), absl::StrCat(at, ": output ", k)));
      if (!(g.meta(v) == (*metas)[k]))
        return absl::InvalidArgumentError(absl::StrCat(at, ": output ", k, " is recorded as ", g.meta(v).ToString(),
                                                       " but inference gives ", (*metas)[k].ToString()));
    }
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const GraphOutput& o = g.outputs()[i];
    if (o.value < 0 || o.value >= nv || !defined[o.value])
      return absl::InvalidArgumentError(absl::StrCat(where, ": output ", i, " refers to an undefined value"));
    if (o.updates >= 0) {
      if (o.updates >= static_cast<int>(g.inputs().size()))
        return absl::InvalidArgumentError(absl::StrCat(where, ": output ", i, " updates input ", o.updates,
                                                       " which does not exist"));
      const GraphInput& in = g.inputs()[o.updates];
      if (!(g.meta(in.value) == g.meta(o.value)))
        return absl::InvalidArgumentError(absl::StrCat(where, ": output ", i, " (", g.meta(o.value).ToString(),
                                                       ") updates %", in.name, " (", g.meta(in.value).ToString(), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler::ir
