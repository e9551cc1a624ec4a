// Recovery pass: attention written out as matmul -> scale -> mask -> softmax
// -> matmul becomes the registry's `sdpa` (kernels/sdpa/sdpa.h; shared rules:
// recover_util.h), so imported models run the flash kernels the built-in
// families use.
//
//   S = matmul(q, kT)                 q [B,H,T,D]; kT [B,H,D,S] (or k with trans_b)
//   S = S * c                         scale, mul or div by a one-element constant; optional
//   S = where(keep, S, fill)          or where(drop, fill, S); optional
//   S = S + A                         an additive mask of any float values; optional
//   P = softmax(S){axis=-1}
//   out = matmul(P, v)                v [B,H,S,Dv]; out [B,H,T,Dv]
//   -> out = sdpa(q, k, v [, mask]){is_causal, scale}
//
// k is kT's source when kT is a permute that swaps k's last two dims
// (composed with any head permute: permute(x, [0,2,3,1]) gives k =
// permute(x, [0,2,1,3])), else a new permute of kT. The scale attribute is
// left out when c is 1/sqrt(D) (up to an f32 constant's rounding), the
// default, and set to c otherwise (no scale at all: 1.0).
//
// Masks. A mask whose values are known (a const input in the table) and whose
// last two dims are [T, S] is causal when it keeps key s for query t exactly
// when s <= t, in every broadcast slice: sdpa gets is_causal and no mask
// tensor. Otherwise:
//   - where with fill -inf: sdpa's boolean mask (true = attend): `keep`
//     itself, or the negation of `drop` (a new constant when drop's values
//     are known, else a logical_not node);
//   - an additive mask A: sdpa's additive mask A (sdpa adds it to the scaled
//     scores, as the pattern does);
//   - where (causal) then add: is_causal plus the additive mask.
// A finite fill (-1e4 as older Hugging Face code writes it, or
// torch.finfo(f32).min) is taken only for a causal mask, where every row keeps
// its diagonal: the decomposed softmax gives a filled entry exp(fill - m),
// m >= the row's largest kept score, which is exactly 0 in f32 once
// m > fill + 104; sdpa's is exactly 0. The two agree unless every kept score
// of a row lies below fill + 104 (-9896 for -1e4). An additive causal mask
// of 0 and finite values <= -1e4 is taken the same way: its masked entries
// exp(s + fill - m) are exactly 0 unless a masked score s exceeds the row's
// largest kept one by more than -fill - 104.
// A row that masks every key gives NaN in the decomposed form and zeros in
// sdpa (kernels/sdpa/sdpa.h); no causal mask has such a row.
//
// Not matched (the decomposed ops stay): softmax over another axis, dropout
// (or anything) between softmax and the second matmul, trans_a on either
// product, batch or head dims that differ between q, k and v (broadcast or
// grouped), ranks other than 4, a finite fill on a mask that is not causal,
// a boolean where followed by an additive mask, and any interior value used
// outside the pattern (returned attention weights, say).
#pragma once

#include "compiler/passes/pass.h"
#include "compiler/passes/recover_util.h"

namespace loom::compiler::passes {

class RecoverAttention : public Pass {
 public:
  // `consts` gives mask and scalar values; the pass adds the negated masks it
  // makes to it. Null: masks are treated as unknown values (never causal).
  explicit RecoverAttention(recover::ConstantTable* consts = nullptr, recover::MatchLog* log = nullptr)
      : consts_(consts), log_(log) {}
  absl::string_view name() const override { return "recover-attention"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;

 private:
  recover::ConstantTable* consts_;
  recover::MatchLog* log_;
};

}  // namespace loom::compiler::passes
