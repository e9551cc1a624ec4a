#include "compiler/optimizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler {

absl::Status AppendAdamW(JointGraph& j, const AdamWOptions& o) {
  ir::Graph& g = j.graph;
  if (j.grads.size() != j.wrt_inputs.size()) return absl::InvalidArgumentError("joint graph: grads do not match wrt");
  if (j.grads.empty()) return absl::InvalidArgumentError("joint graph: nothing to optimize (no parameters)");
  if (g.FindInput("lr") >= 0) return absl::InvalidArgumentError("the graph already has an input named %lr");
  // A forward graph may read the step itself (dropout's offset): an f32[]
  // data input named %step is shared with the optimizer.
  const ir::TensorMeta scalar{DType::kF32, {}};
  int step = -1;
  if (const int k = g.FindInput("step"); k >= 0) {
    const ir::GraphInput& in = g.inputs()[k];
    if (in.kind != ir::InputKind::kInput || !(g.meta(in.value) == scalar))
      return absl::InvalidArgumentError(absl::StrCat("the graph already has an input named %step (",
                                                     ir::InputKindName(in.kind), " ", g.meta(in.value).ToString(),
                                                     "); the optimizer can share it only as an f32[] input"));
    step = in.value;
  }
  const int lr = g.AddInput("lr", scalar);
  if (step < 0) step = g.AddInput("step", scalar);
  auto gn = g.AddOp1(o.grad_norm_op, j.grads);
  if (!gn.ok()) return Annotate(gn.status(), "optimizer: global norm");
  kernels::Attrs attrs{{"beta1", o.beta1},
                       {"beta2", o.beta2},
                       {"eps", o.eps},
                       {"weight_decay", o.weight_decay},
                       {"max_norm", o.max_norm}};
  std::vector<ir::GraphOutput> outs(g.outputs().begin(), g.outputs().begin() + j.num_forward_outputs);
  if (o.keep_gradients)
    outs.insert(outs.end(), g.outputs().begin() + j.num_forward_outputs, g.outputs().end());
  for (size_t i = 0; i < j.wrt_inputs.size(); ++i) {
    const int pk = j.wrt_inputs[i];
    const std::string pname = g.inputs()[pk].name;
    const int p = g.inputs()[pk].value;
    const ir::TensorMeta meta = g.meta(p);
    for (const char* suffix : {".m", ".v"})
      if (g.FindInput(pname + suffix) >= 0)
        return absl::InvalidArgumentError(absl::StrCat("the graph already has an input named %", pname, suffix));
    const int m = g.AddInput(pname + ".m", meta, ir::InputKind::kState);
    const int mk = static_cast<int>(g.inputs().size()) - 1;
    const int v = g.AddInput(pname + ".v", meta, ir::InputKind::kState);
    const int vk = mk + 1;
    kernels::Attrs pattrs = attrs;
    if (o.decays && !o.decays(pname)) pattrs.Set("weight_decay", 0.0);
    auto upd = g.AddOp(o.adamw_op, {p, j.grads[i], m, v, *gn, lr, step}, pattrs);
    if (!upd.ok()) return Annotate(upd.status(), absl::StrCat("optimizer: updating %", pname));
    if (upd->size() != 3)
      return absl::InternalError(absl::StrCat(o.adamw_op, " returned ", upd->size(), " outputs, expected 3"));
    outs.push_back({(*upd)[0], pk});
    outs.push_back({(*upd)[1], mk});
    outs.push_back({(*upd)[2], vk});
  }
  g.mutable_outputs() = std::move(outs);
  return Annotate(ir::Verify(g), "optimizer produced an invalid graph");
}

}  // namespace loom::compiler
