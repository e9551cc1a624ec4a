// Common subexpression elimination: two nodes with the same op, attrs, inputs,
// compute dtype and output placements compute the same values; the later one
// is dropped and its uses point at the earlier one. Fused nodes compare their
// subgraphs' text. Runs in one forward sweep, so chains of duplicates collapse.
//
//   %0 = exp(%x) : f32[4]                  %0 = exp(%x) : f32[4]
//   %1 = exp(%x) : f32[4]          ==>     %1 = add(%0, %0) : f32[4]
//   %2 = add(%0, %1) : f32[4]
#pragma once

#include "compiler/passes/pass.h"

namespace loom::compiler::passes {

class CommonSubexpressionElimination : public Pass {
 public:
  absl::string_view name() const override { return "cse"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;
};

}  // namespace loom::compiler::passes
