// Dead code elimination: removes nodes none of whose outputs reach a graph
// output. Graph inputs are kept (they are the graph's signature).
//
//   graph @g(%x: f32[4]) {                 graph @g(%x: f32[4]) {
//     %0 = relu(%x) : f32[4]        ==>       %0 = exp(%x) : f32[4]
//     %1 = exp(%x) : f32[4]                   return %0
//     return %1                             }
//   }
#pragma once

#include "compiler/passes/pass.h"

namespace loom::compiler::passes {

class DeadCodeElimination : public Pass {
 public:
  absl::string_view name() const override { return "dce"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;
};

}  // namespace loom::compiler::passes
