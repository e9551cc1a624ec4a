#include "compiler/executor.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler {

absl::StatusOr<Executor> Executor::Create(const ir::Graph& g, const LoweringOptions& options) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Program> p, Lower(g, options));
  return Executor(std::move(p));
}

absl::Status Executor::Run(absl::Span<const Tensor> inputs, std::vector<Tensor>* outputs) {
  Program& p = *program_;
  if (inputs.size() != p.input_metas.size())
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: expected ", p.input_metas.size(), " tensors, got ", inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const ir::TensorMeta& m = p.input_metas[i];
    if (!t.defined() || t.dtype() != m.dtype || t.shape() != m.shape || !t.device().is_cpu())
      return absl::InvalidArgumentError(absl::StrCat(
          "input %", p.graph.inputs()[i].name, ": expected ", m.ToString(), " on cpu, got ",
          t.defined() ? t.DebugString() : std::string("an undefined tensor")));
    if (p.input_written[i] && !t.is_contiguous())
      return absl::InvalidArgumentError(
          absl::StrCat("input %", p.graph.inputs()[i].name, ": is updated in place and must be contiguous"));
  }
  for (KernelCall& c : p.calls) {
    for (const auto& [pos, in] : c.bind) c.inputs[pos] = inputs[in];
    for (const auto& [pos, in] : c.out_bind) c.outputs[pos] = inputs[in];
    absl::Status s = c.fn(c.inputs, absl::MakeSpan(c.outputs), c.attrs);
    if (!s.ok()) return Annotate(s, absl::StrCat("node ", c.node, " (", c.op, ")"));
  }
  // Drop the step's references to the caller's tensors.
  static const Tensor kUnbound;
  for (KernelCall& c : p.calls)
    for (const auto& [pos, in] : c.bind) c.inputs[pos] = kUnbound;
  for (KernelCall& c : p.calls)
    for (const auto& [pos, in] : c.out_bind) c.outputs[pos] = kUnbound;
  outputs->resize(p.outputs.size());
  for (size_t i = 0; i < p.outputs.size(); ++i)
    (*outputs)[i] = p.outputs[i].input >= 0 ? inputs[p.outputs[i].input] : p.outputs[i].view;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Executor::Run(absl::Span<const Tensor> inputs) {
  std::vector<Tensor> outs;
  LOOM_RETURN_IF_ERROR(Run(inputs, &outs));
  return outs;
}

absl::Status Executor::ApplyUpdates(absl::Span<Tensor> inputs, const std::vector<Tensor>& outputs) const {
  const Program& p = *program_;
  if (outputs.size() != p.outputs.size() || inputs.size() != p.input_metas.size())
    return absl::InvalidArgumentError("ApplyUpdates: inputs/outputs do not match the program");
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    int k = p.outputs[i].updates;
    if (k < 0 || p.outputs[i].input == k) continue;
    LOOM_RETURN_IF_ERROR(Annotate(inputs[k].CopyFrom(outputs[i]), absl::StrCat("updating %", p.graph.inputs()[k].name)));
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
