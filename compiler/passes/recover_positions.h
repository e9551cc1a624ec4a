// Recovery pass: a lookup of the rows 0, 1, ..., n-1 of a table, in order,
// becomes the table itself (or its first n rows). Learned position
// embeddings export this way: wpe(arange(T)) arrives as a gather (or
// embedding) of the position buffer, folded to a constant 0..T-1 at import;
// the built-in families add wpe itself. Shared rules: recover_util.h.
//
//   gather(table, idx){axis=0} or embedding(table, idx), idx a known integer
//   constant whose elements, read in order, are 0, 1, ..., n-1
//   -> table                                    (n = rows, same shape)
//   -> slice(table){axis=0, start=0, length=n}  (n < rows)
//   then reshape to the lookup's shape when idx has more than one dim
//   (Hugging Face's position_ids [1, T]).
//
// Exact: the same rows in the same order; gradients reach the table either
// way. Not matched: indices in another order, negative or repeated indices,
// other axes, unknown (data-dependent) indices.
//
//   graph @g(%wpe: f32[8, 32] param, %pos: i64[8] const) {      graph @g(%wpe: f32[8, 32] param, ...) {
//     %0 = gather(%wpe, %pos) {axis=0} : f32[8, 32]       ==>      return %wpe
//     return %0                                                  }
//   }
#pragma once

#include "compiler/passes/pass.h"
#include "compiler/passes/recover_util.h"

namespace loom::compiler::passes {

class RecoverPositions : public Pass {
 public:
  explicit RecoverPositions(const recover::ConstantTable* consts, recover::MatchLog* log = nullptr)
      : consts_(consts), log_(log) {}
  absl::string_view name() const override { return "recover-positions"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;

 private:
  const recover::ConstantTable* consts_;
  recover::MatchLog* log_;
};

}  // namespace loom::compiler::passes
