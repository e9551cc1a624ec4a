#include "compiler/spmd/bucketing.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler::spmd {

using ir::Graph;
using ir::Node;
using kernels::TensorMeta;

namespace {

bool Candidate(const Graph& g, const Node& n, const BucketOptions& o) {
  return n.op == "all_reduce" && n.attrs.GetString("group", "world") == o.group &&
         n.attrs.GetString("reduce", "sum") == "sum" && n.inputs.size() == 1 &&
         g.meta(n.inputs[0]).dtype == DType::kF32;
}

int64_t Elems(const TensorMeta& m) {
  int64_t e = 1;
  for (int64_t d : m.shape) e *= d;
  return e;
}

}  // namespace

absl::StatusOr<BucketStats> BucketAllReduces(Graph& g, const BucketOptions& o) {
  BucketStats stats;
  Graph out(g.name());
  std::vector<int> map(g.values().size(), -1);
  for (const auto& in : g.inputs()) {
    const int v = out.AddInput(in.name, g.meta(in.value), in.kind);
    out.value(v).placement = g.value(in.value).placement;
    map[in.value] = v;
  }
  std::vector<const Node*> pending;  // all_reduce nodes of the open bucket
  int64_t pending_bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (pending.empty()) return absl::OkStatus();
    if (pending.size() == 1) {
      const Node& n = *pending[0];
      LOOM_ASSIGN_OR_RETURN(int v, out.AddOp1(n.op, {map[n.inputs[0]]}, n.attrs));
      out.value(v).placement = g.value(n.outputs[0]).placement;
      map[n.outputs[0]] = v;
      ++stats.all_reduces_after;
    } else {
      std::vector<int> flat;
      for (const Node* n : pending) {
        LOOM_ASSIGN_OR_RETURN(int f, out.AddOp1("reshape", {map[n->inputs[0]]},
                                                {{"shape", std::vector<int64_t>{Elems(g.meta(n->inputs[0]))}}}));
        flat.push_back(f);
      }
      LOOM_ASSIGN_OR_RETURN(int cat, out.AddOp1("concat", flat, {{"axis", int64_t{0}}}));
      LOOM_ASSIGN_OR_RETURN(int red, out.AddOp1("all_reduce", {cat}, pending[0]->attrs));
      ++stats.all_reduces_after;
      int64_t offset = 0;
      for (const Node* n : pending) {
        const TensorMeta& m = g.meta(n->outputs[0]);
        const int64_t e = Elems(m);
        LOOM_ASSIGN_OR_RETURN(int s, out.AddOp1("slice", {red}, {{"axis", int64_t{0}}, {"start", offset}, {"length", e}}));
        LOOM_ASSIGN_OR_RETURN(int r, out.AddOp1("reshape", {s}, {{"shape", std::vector<int64_t>(m.shape.begin(), m.shape.end())}}));
        out.value(r).placement = g.value(n->outputs[0]).placement;
        map[n->outputs[0]] = r;
        offset += e;
      }
    }
    pending.clear();
    pending_bytes = 0;
    return absl::OkStatus();
  };
  for (const Node& n : g.nodes()) {
    for (int v : n.inputs)
      if (map[v] < 0) LOOM_RETURN_IF_ERROR(flush());  // reads a pending member
    if (Candidate(g, n, o)) {
      ++stats.all_reduces_before;
      const int64_t bytes = 4 * Elems(g.meta(n.inputs[0]));
      if (!pending.empty() && pending_bytes + bytes > o.bucket_bytes) LOOM_RETURN_IF_ERROR(flush());
      pending.push_back(&n);
      pending_bytes += bytes;
      if (pending_bytes >= o.bucket_bytes) LOOM_RETURN_IF_ERROR(flush());
      continue;
    }
    if (n.op == ir::kFusedOp)
      return absl::InvalidArgumentError("gradient bucketing runs before fusion (found a fused node)");
    std::vector<int> in;
    for (int v : n.inputs) in.push_back(map[v]);
    LOOM_ASSIGN_OR_RETURN(std::vector<int> res, out.AddOp(n.op, in, n.attrs));
    for (size_t i = 0; i < res.size(); ++i) {
      out.value(res[i]).placement = g.value(n.outputs[i]).placement;
      map[n.outputs[i]] = res[i];
    }
  }
  LOOM_RETURN_IF_ERROR(flush());
  for (const auto& o2 : g.outputs()) out.AddOutput(map[o2.value], o2.updates);
  LOOM_RETURN_IF_ERROR(Annotate(ir::Verify(out), "gradient bucketing produced an invalid graph"));
  g = std::move(out);
  return stats;
}

}  // namespace loom::compiler::spmd
