#include "compiler/passes/cse.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/text.h"

namespace loom::compiler::passes {

absl::StatusOr<bool> CommonSubexpressionElimination::Run(ir::Graph& g) {
  std::map<std::string, int> seen;  // key -> index in `kept`
  std::vector<int> replace(g.values().size());
  for (size_t v = 0; v < replace.size(); ++v) replace[v] = static_cast<int>(v);
  std::vector<ir::Node> kept;
  bool changed = false;
  for (ir::Node& n : g.mutable_nodes()) {
    for (int& v : n.inputs) v = replace[v];
    std::string key = absl::StrCat(n.op, "(", absl::StrJoin(n.inputs, ","), ")", n.attrs.ToString());
    if (n.compute_dtype) absl::StrAppend(&key, " compute=", DTypeName(*n.compute_dtype));
    for (int v : n.outputs) absl::StrAppend(&key, " @", g.value(v).placement, ";");
    if (n.subgraph) absl::StrAppend(&key, ir::PrintGraph(*n.subgraph));
    auto it = seen.find(key);
    if (it != seen.end() && n.outputs.size() == kept[it->second].outputs.size()) {
      for (size_t k = 0; k < n.outputs.size(); ++k) replace[n.outputs[k]] = kept[it->second].outputs[k];
      changed = true;
      continue;
    }
    seen.emplace(key, static_cast<int>(kept.size()));
    kept.push_back(std::move(n));
  }
  g.mutable_nodes() = std::move(kept);
  for (ir::GraphOutput& o : g.mutable_outputs()) o.value = replace[o.value];
  return changed;
}

}  // namespace loom::compiler::passes
