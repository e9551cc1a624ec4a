#include "compiler/autodiff.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler {
namespace {

// Emits gradient nodes into a graph.
class GraphGradBuilder : public kernels::GradBuilder {
 public:
  explicit GraphGradBuilder(ir::Graph& g) : g_(g) {}
  absl::StatusOr<std::vector<Value>> Emit(absl::string_view op, std::vector<Value> inputs,
                                          kernels::Attrs attrs) override {
    for (Value v : inputs)
      if (v < 0 || v >= static_cast<Value>(g_.values().size()))
        return absl::InternalError(absl::StrCat("grad rule passed an invalid value to ", op));
    return g_.AddOp(op, std::move(inputs), std::move(attrs));
  }
  ir::TensorMeta Meta(Value v) const override { return g_.meta(v); }

 private:
  ir::Graph& g_;
};

}  // namespace

absl::StatusOr<JointGraph> BuildJointGraph(const ir::Graph& forward, const AutodiffOptions& options) {
  LOOM_RETURN_IF_ERROR(ir::Verify(forward));
  JointGraph j;
  j.graph = forward;
  ir::Graph& g = j.graph;
  j.num_forward_outputs = static_cast<int>(g.outputs().size());
  if (options.loss_output < 0 || options.loss_output >= j.num_forward_outputs)
    return absl::InvalidArgumentError(absl::StrCat("loss_output: ", options.loss_output, " is not an output of @",
                                                   g.name()));
  const int loss = g.outputs()[options.loss_output].value;
  if (!IsFloating(g.meta(loss).dtype))
    return absl::InvalidArgumentError(absl::StrCat("loss: must be floating, is ", g.meta(loss).ToString()));

  if (options.wrt.empty()) {
    for (size_t i = 0; i < g.inputs().size(); ++i)
      if (g.inputs()[i].kind == ir::InputKind::kParam) j.wrt_inputs.push_back(static_cast<int>(i));
  } else {
    for (const std::string& name : options.wrt) {
      int k = g.FindInput(name);
      if (k < 0) return absl::InvalidArgumentError(absl::StrCat("wrt: no input named '", name, "'"));
      j.wrt_inputs.push_back(k);
    }
  }

  const int n = static_cast<int>(g.nodes().size());
  std::vector<bool> needs(g.values().size(), false);
  for (int k : j.wrt_inputs) needs[g.inputs()[k].value] = IsFloating(g.meta(g.inputs()[k].value).dtype);
  std::vector<bool> node_requires(n, false);
  for (int i = 0; i < n; ++i) {
    for (int v : g.nodes()[i].inputs) node_requires[i] = node_requires[i] || needs[v];
    if (node_requires[i])
      for (int v : g.nodes()[i].outputs) needs[v] = IsFloating(g.meta(v).dtype);
  }

  std::vector<int> grad(g.values().size(), -1);
  GraphGradBuilder b(g);
  auto accumulate = [&](int v, int dv) -> absl::Status {
    if (grad[v] < 0) {
      grad[v] = dv;
    } else {
      LOOM_ASSIGN_OR_RETURN(grad[v], g.AddOp1(options.add_op, {grad[v], dv}));
    }
    return absl::OkStatus();
  };
  {
    if (!std::isfinite(options.seed) || options.seed == 0)
      return absl::InvalidArgumentError(absl::StrCat("autodiff: seed must be finite and nonzero, got ", options.seed));
    const Shape& s = g.meta(loss).shape;
    auto seed = g.AddOp1(options.fill_op, {},
                         kernels::Attrs{{"shape", std::vector<int64_t>(s.begin(), s.end())},
                                        {"dtype", std::string(DTypeName(g.meta(loss).dtype))},
                                        {"value", options.seed}});
    if (!seed.ok()) return Annotate(seed.status(), "autodiff: seeding the loss gradient");
    grad[loss] = *seed;
  }
  for (int i = n - 1; i >= 0; --i) {
    if (!node_requires[i]) continue;
    // Copy: emitting nodes grows the node vector.
    const ir::Node node = g.nodes()[i];
    bool any = false;
    for (int v : node.outputs) any = any || grad[v] >= 0;
    if (!any) continue;
    const std::string where = absl::StrCat("autodiff: node ", i, " (", node.op, ")");
    if (node.op == ir::kFusedOp)
      return absl::FailedPreconditionError(absl::StrCat(where, ": differentiate before fusion"));
    LOOM_ASSIGN_OR_RETURN(const kernels::OpDef* def, kernels::OpRegistry::Global().Get(node.op));
    if (!def->grad)
      return absl::FailedPreconditionError(
          absl::StrCat(where, " has no gradient rule: ", def->no_grad_reason.empty() ? "none given" : def->no_grad_reason));
    kernels::GradContext ctx;
    ctx.inputs = node.inputs;
    ctx.outputs = node.outputs;
    ctx.attrs = node.attrs;
    for (int v : node.outputs) ctx.grad_outputs.push_back(grad[v] >= 0 ? grad[v] : kernels::GradBuilder::kNone);
    const size_t first_new = g.nodes().size();
    auto dins = def->grad(b, ctx);
    if (!dins.ok()) return Annotate(dins.status(), where);
    if (dins->size() != node.inputs.size())
      return absl::InternalError(absl::StrCat(where, ": grad rule returned ", dins->size(), " values for ",
                                              node.inputs.size(), " inputs"));
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      int v = node.inputs[k], dv = (*dins)[k];
      if (dv == kernels::GradBuilder::kNone || !needs[v]) continue;
      if (!(g.meta(dv) == g.meta(v)))
        return absl::InternalError(absl::StrCat(where, ": gradient of input ", k, " is ", g.meta(dv).ToString(),
                                                " but the input is ", g.meta(v).ToString()));
      LOOM_RETURN_IF_ERROR(Annotate(accumulate(v, dv), where));
    }
    // The gradient nodes (and the adds accumulating them) come from the node.
    for (size_t k = first_new; k < g.nodes().size(); ++k) g.mutable_nodes()[k].origin = node.origin;
  }
  for (int k : j.wrt_inputs) {
    int v = g.inputs()[k].value;
    if (grad[v] < 0) {  // the loss does not depend on it
      const Shape& s = g.meta(v).shape;
      LOOM_ASSIGN_OR_RETURN(grad[v], g.AddOp1(options.fill_op, {},
                                              kernels::Attrs{{"shape", std::vector<int64_t>(s.begin(), s.end())},
                                                             {"dtype", std::string(DTypeName(g.meta(v).dtype))},
                                                             {"value", 0.0}}));
    }
    j.grads.push_back(grad[v]);
    g.AddOutput(grad[v]);
  }
  LOOM_RETURN_IF_ERROR(Annotate(ir::Verify(g), "autodiff produced an invalid graph"));
  return j;
}

}  // namespace loom::compiler
