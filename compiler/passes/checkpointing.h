// Activation checkpointing (train.activation_checkpointing: blocks or
// selective): on a
// joint graph (forward, backward, optimizer), each transformer block keeps
// only its input alive into the backward pass; the block's forward ops are
// cloned right before the first backward op that reads one of the block's
// other activations, and the backward ops read the clones. The memory plan
// then sees the forward activations die inside the forward pass.
//
// The blocks come from the parameters: `block_of(name)` gives a parameter's
// block index (or -1). The forward ops are the loss's (output 0) ancestors;
// block b's segment is the forward ops from the first that reads a block-b
// parameter up to the next forward op that reads a parameter of another block
// (or none). A segment value that forward ops of other segments read (the
// block's output, the next block's input) is kept, not recomputed. Clones are
// the same ops on the same inputs (dropout's seed and step included), so
// they produce the same values bit for bit. Run after CSE (which would merge
// the clones back); unused clones are left for DCE.
//
//   graph @g(%x, %w0 param, %w1 param)          ... backward of block 1 ...
//     %0 = matmul(%x, %w0)        block 0       %0' = matmul(%x, %w0)
//     %1 = relu(%0)               block 0  ==>  %1' = relu(%0')
//     ...                                       relu_backward(dy, %1')
#pragma once

#include <functional>
#include <string>

#include "compiler/passes/pass.h"

namespace loom::compiler::passes {

class ActivationCheckpointing : public Pass {
 public:
  // selective: recompute only the cheap ops; the outputs of matmul, sdpa and
  // the collectives (all_reduce, all_gather, reduce_scatter) stay alive into
  // the backward as without checkpointing (IsKeptSelectively).
  explicit ActivationCheckpointing(std::function<int(const std::string& param)> block_of, bool selective = false)
      : block_of_(std::move(block_of)), selective_(selective) {}
  absl::string_view name() const override { return "activation-checkpointing"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;

 private:
  std::function<int(const std::string&)> block_of_;
  bool selective_ = false;
};

// The ops whose outputs selective checkpointing keeps.
bool IsKeptSelectively(absl::string_view op);

}  // namespace loom::compiler::passes
