// PointwiseBodyOf: compiler IR -> the generator's PwBody (pointwise_body.h).
#include "compiler/cuda/pointwise_body.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace loom::compiler::cuda {

namespace cg = ::loom::kernels::cuda::codegen;

absl::StatusOr<cg::PwBody> PointwiseBodyOf(const ir::Graph& body) {
  cg::PwBody b;
  b.num_inputs = static_cast<int>(body.inputs().size());
  // Graph value id -> body value id (-1: not defined yet).
  std::vector<int> id(body.values().size(), -1);
  for (int k = 0; k < b.num_inputs; ++k) id[body.inputs()[k].value] = k;
  for (size_t n = 0; n < body.nodes().size(); ++n) {
    const ir::Node& node = body.nodes()[n];
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("pointwise body of ", body.name(), ": node ", n, " (", node.op, "): ", why));
    };
    if (node.outputs.size() != 1) return bad(absl::StrCat("expected 1 output, got ", node.outputs.size()));
    cg::PwNode pn;
    pn.op = node.op;
    pn.attrs = node.attrs;
    for (int v : node.inputs) {
      if (v < 0 || v >= static_cast<int>(id.size()) || id[v] < 0)
        return bad(absl::StrCat("input %", v, " is not defined before the node"));
      pn.inputs.push_back(id[v]);
    }
    id[node.outputs[0]] = b.num_inputs + static_cast<int>(n);
    b.nodes.push_back(std::move(pn));
  }
  if (body.outputs().size() != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("pointwise body of ", body.name(), ": expected 1 output, got ", body.outputs().size()));
  const int out = body.outputs()[0].value;
  if (out < 0 || out >= static_cast<int>(id.size()) || id[out] < 0)
    return absl::InvalidArgumentError(absl::StrCat("pointwise body of ", body.name(), ": the output is not defined"));
  b.output = id[out];
  return b;
}

absl::StatusOr<cg::PwBody> PointwiseBodyOf(const ir::Graph& g, int node) {
  const ir::Node& n = g.nodes()[node];
  if (n.op == ir::kFusedOp) {
    if (!n.subgraph)
      return absl::InvalidArgumentError(absl::StrCat("pointwise body: fused node ", node, " has no subgraph"));
    return PointwiseBodyOf(*n.subgraph);
  }
  return cg::SingleOpBody(n.op, n.attrs, static_cast<int>(n.inputs.size()));
}

}  // namespace loom::compiler::cuda
