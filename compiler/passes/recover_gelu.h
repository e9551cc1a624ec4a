// Recovery pass: the erf and tanh forms of GELU become the registry's `gelu`
// (shared rules: recover_util.h).
//
//   erf:  0.5 * x * (1 + erf(x / sqrt(2)))                        -> gelu(x){approximate="none"}
//   tanh: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> gelu(x){approximate="tanh"}
//
// Products are read as a constant times factors, through mul, scale (x * c,
// x / c as ONNX's Div by a constant imports), mul by a one-element constant
// and pow_scalar with p = 2 or 3, in any association and order: torch 1.13
// exports F.gelu as Mul(Mul(x, Add(Erf(Div(x, 1.4142135)), 1)), 0.5) and the
// tanh form with x * (x * x); Hugging Face's NewGELU writes 0.5 * x * ... with
// torch.pow(x, 3.0). Each constant must be the true one up to an f32
// constant's rounding (1/sqrt(2), sqrt(2/pi), 0.044715, and exactly 0.5 and
// 1); a value inside the pattern may have no other use.
//
// Not matched: other constants (quick-GELU's x * sigmoid(1.702 x), a
// different cubic coefficient), a tanh or erf of something other than the
// same x, and any interior value used elsewhere.
//
//   %0 = scale(%x) {s=0.70710679328816484} : f32[4, 8]
//   %1 = erf(%0) : f32[4, 8]
//   %2 = add_scalar(%1) {s=1.0} : f32[4, 8]          ==>   %0 = gelu(%x) {approximate="none"} : f32[4, 8]
//   %3 = mul(%x, %2) : f32[4, 8]
//   %4 = scale(%3) {s=0.5} : f32[4, 8]
#pragma once

#include "compiler/passes/pass.h"
#include "compiler/passes/recover_util.h"

namespace loom::compiler::passes {

class RecoverGelu : public Pass {
 public:
  // `consts` (may be null) gives scalar constants read as graph inputs.
  explicit RecoverGelu(const recover::ConstantTable* consts = nullptr, recover::MatchLog* log = nullptr)
      : consts_(consts), log_(log) {}
  absl::string_view name() const override { return "recover-gelu"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;

 private:
  const recover::ConstantTable* consts_;
  recover::MatchLog* log_;
};

}  // namespace loom::compiler::passes
