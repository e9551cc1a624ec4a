// Elementwise fusion: groups connected elementwise ops (OpDef::elementwise,
// one output) into one "fused" node whose subgraph holds them. The lowering
// (compiler/lowering.h) runs a fused node as one loop over chunks of the
// output: each member's kernel runs on a chunk (a few thousand elements), so
// intermediates only ever exist as chunk-sized scratch, never as full tensors.
//
// A producer joins its consumer's group when
//   - both are elementwise registry ops with one output,
//   - every use of the producer's output is inside the group and it is not a
//     graph output (so the group has exactly one output: its root),
//   - the producer's output has the root's dtype and shape (external inputs may
//     still broadcast).
// Groups of one node are left alone. The fused node takes the group's external
// inputs in order of first use and sits where the root was.
//
// Before grouping, a unary elementwise op read by several fusible ops of its
// dtype and shape (and by nothing else), whose input is kept anyway (a graph
// input, or read by more than the op), is recomputed in each reader instead
// of stored: each reader gets its own copy, which then joins its group.
// SwiGLU's silu(g) is the case: the forward's multiply and the backward's
// both read it, and g is kept for the backward anyway; the forward becomes
// one loop and silu(g) is never stored. The arithmetic is the same, so
// results are bitwise those without it.
//
//   graph @g(%x: f32[4, 8], %b: f32[8]) {        graph @g(%x: f32[4, 8], %b: f32[8]) {
//     %0 = add(%x, %b) : f32[4, 8]                  %0 = fused(%x, %b) : f32[4, 8] graph @fused_0(
//     %1 = relu(%0) : f32[4, 8]          ==>            %x0: f32[4, 8], %x1: f32[8]) {
//     return %1                                       %0 = add(%x0, %x1) : f32[4, 8]
//   }                                                 %1 = relu(%0) : f32[4, 8]
//                                                     return %1
//                                                   }
//                                                   return %0
//                                                 }
#pragma once

#include "compiler/passes/pass.h"

namespace loom::compiler::passes {

class ElementwiseFusion : public Pass {
 public:
  absl::string_view name() const override { return "fusion"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;
};

}  // namespace loom::compiler::passes
