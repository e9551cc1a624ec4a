// The executor: runs a lowered Program, one call per training/inference step.
//
//   LOOM_ASSIGN_OR_RETURN(Executor exec, Executor::Create(graph));
//   std::vector<Tensor> outs;
//   LOOM_RETURN_IF_ERROR(exec.Run(inputs, &outs));   // inputs in graph-input order
//   LOOM_RETURN_IF_ERROR(exec.ApplyUpdates(inputs, outs));  // params/state <- updated outputs
//
// Run binds the inputs (checked against the graph's metas), then calls every
// kernel in order on the preplanned arena views. It allocates no tensor memory:
// outputs are views into the arena (or the inputs themselves) and stay valid
// until the next Run. Do not pass an output of the previous step back in as an
// input (the arena is reused during the step): copy it into your own tensor
// first — ApplyUpdates does exactly that for outputs that update an input.
// With LoweringOptions::in_place_updates, such outputs are instead written
// straight into the input tensors during Run (program().input_written says
// which), and ApplyUpdates skips them.
//
// Not thread-safe: one Run at a time per Executor.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/lowering.h"

namespace loom::compiler {

class Executor {
 public:
  explicit Executor(std::unique_ptr<Program> program) : program_(std::move(program)) {}
  static absl::StatusOr<Executor> Create(const ir::Graph& g, const LoweringOptions& options = {});

  absl::Status Run(absl::Span<const Tensor> inputs, std::vector<Tensor>* outputs);
  absl::StatusOr<std::vector<Tensor>> Run(absl::Span<const Tensor> inputs);
  // For every output that updates input k: inputs[k].CopyFrom(output).
  absl::Status ApplyUpdates(absl::Span<Tensor> inputs, const std::vector<Tensor>& outputs) const;

  const Program& program() const { return *program_; }

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace loom::compiler
