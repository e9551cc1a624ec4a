// Algebraic simplifications of the joint (forward + backward) graph that remove
// whole-tensor intermediates autodiff leaves behind. Both rewrites are exact
// (the same sums, reassociated only where the original already summed).
//
// 1. Batched weight gradients.  Autodiff differentiates x[B, T, C] @ W[C, N] as
//      %g3 = matmul(%x, %dy) {trans_a=true}   : [B, C, N]   (one product per batch)
//      %dW = sum_to(%g3) {shape=[C, N]}       : [C, N]
//    which materialises B partial products and then reduces them. Stacking the
//    batches along the contraction dimension gives the same sum in one GEMM:
//      %dW = matmul(reshape(%x, [B*T, C]), reshape(%dy, [B*T, N])) {trans_a=true}
//    Applied when both operands are 3-D with the same batch, trans_a is true,
//    trans_b false (only then is the stacking a reshape), the sum_to reduces
//    exactly the batch dimension, and the batched product has no other use.
//
// 2. Gradients of slices that tile a tensor.  q, k, v = slices of qkv along an
//    axis give, in the backward, add(add(slice_backward(dq), slice_backward(dk)),
//    slice_backward(dv)): three zero-padded full-size tensors and two full-size
//    adds. When the slice_backwards of an add tree share (axis, full_len), their
//    windows are disjoint and cover [0, full_len), and the inner adds have no
//    other use, the tree is one concat of the slice gradients in window order.
//
// The new nodes of a rewrite take the replaced node's place in the node
// order, so the pass keeps the schedule it is given (compiler/spmd schedules
// gradient reductions right after their producers before this pass runs).
//
//   PassPipeline p;
//   p.Add<AlgebraicSimplification>();   // then CSE/DCE drop the dead originals
#pragma once

#include "compiler/passes/pass.h"

namespace loom::compiler::passes {

class AlgebraicSimplification : public Pass {
 public:
  absl::string_view name() const override { return "simplify"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;
};

}  // namespace loom::compiler::passes
