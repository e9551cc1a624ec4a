// Recovery pass: decomposed LayerNorm and RMSNorm become the registry's fused
// `layernorm` and `rmsnorm` (shared rules: recover_util.h). Both normalise
// over the last axis, with statistics in the input's dtype:
//
// LayerNorm (ONNX before opset 17; torch's nn.LayerNorm, biased variance):
//   m = mean(x){axes=[-1], keepdim}   d = sub(x, m)
//   v = mean(d^2){axes=[-1], keepdim}   with d^2 = pow_scalar(d){p=2} | mul(d, d)
//   e = v + eps                         add_scalar(v){s=eps} | add(v, scalar const)
//   n = d / sqrt(e)                     div(d, sqrt(e)) | mul(d, rsqrt(e)) |
//                                       mul(d, reciprocal(sqrt(e))) | mul(d, div(1, sqrt(e)))
//   y = n * w + b                       either operand order; w, b of shape [C]
//   -> layernorm(x, w, b){eps}
//
// RMSNorm (Llama's: x * rsqrt(mean(x^2) + eps) * w):
//   e = mean(x^2){axes=[-1], keepdim} + eps
//   n = x * rsqrt(e) | x * reciprocal(sqrt(e)) | x / sqrt(e)     (either order)
//   y = n * w                                                     w of shape [C]
//   -> rmsnorm(x, w){eps}
//
// Not matched (the decomposed ops stay): a norm without its affine weight
// (and, for LayerNorm, bias), statistics over other or several axes, the
// unbiased variance, eps <= 0, a weight that is not [C], and any interior
// value used outside the pattern (a returned mean, say).
//
//   %0 = mean(%x) {axes=[2], keepdim=true} : f32[2, 8, 1]
//   %1 = sub(%x, %0) : f32[2, 8, 32]
//   %2 = pow_scalar(%1) {p=2.0} : f32[2, 8, 32]
//   %3 = mean(%2) {axes=[2], keepdim=true} : f32[2, 8, 1]
//   %4 = add_scalar(%3) {s=1.0000000000000001e-05} : f32[2, 8, 1]     ==>   %0, %1, %2 = layernorm(%x, %w, %b)
//   %5 = sqrt(%4) : f32[2, 8, 1]                                                {eps=1.0000000000000001e-05} : ...
//   %6 = div(%1, %5) : f32[2, 8, 32]
//   %7 = mul(%6, %w) : f32[2, 8, 32]
//   %8 = add(%7, %b) : f32[2, 8, 32]
#pragma once

#include "compiler/passes/pass.h"
#include "compiler/passes/recover_util.h"

namespace loom::compiler::passes {

class RecoverNorms : public Pass {
 public:
  // `consts` (may be null) gives scalar constants read as graph inputs.
  explicit RecoverNorms(const recover::ConstantTable* consts = nullptr, recover::MatchLog* log = nullptr)
      : consts_(consts), log_(log) {}
  absl::string_view name() const override { return "recover-norms"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;

 private:
  const recover::ConstantTable* consts_;
  recover::MatchLog* log_;
};

}  // namespace loom::compiler::passes
