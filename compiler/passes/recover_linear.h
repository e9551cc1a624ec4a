// Recovery pass: linear layers in the form the built-in families use,
// matmul(x, W) followed by add(product, b), so the same GEMM (and, on CUDA,
// the same bias / bias+GELU epilogue) runs them. Shared rules:
// recover_util.h. Three rewrites, each exact:
//
// 1. A weight read through a transpose, matmul(x, permute(W){dims=[1, 0]})
//    with W a matrix and no trans_b, reads W transposed instead:
//    matmul(x, W){trans_b=true}. This is how nn.Linear ([out, in]) and a tied
//    head (x @ wte^T) export; the permute copy goes when nothing else reads it.
//    W keeps its name and shape (tensor-parallel plans find it by name).
//    Batched transposes (attention's k^T) are recover_attention's.
// 2. A bias added in front, add(b, product) with b[N] the product's last
//    dim and the product used only there, becomes add(product, b) (addition
//    commutes exactly in floating point).
// 3. Gemm's explicit false flags (trans_a=false, trans_b=false) are dropped:
//    absent means false.
//
//   graph @g(%x: f32[2, 8, 32], %w: f32[96, 32] param, %b: f32[96] param) {
//     %0 = permute(%w) {dims=[1, 0]} : f32[32, 96]        graph @g(...) {
//     %1 = matmul(%x, %0) : f32[2, 8, 96]          ==>      %0 = matmul(%x, %w) {trans_b=true} : f32[2, 8, 96]
//     %2 = add(%b, %1) : f32[2, 8, 96]                      %1 = add(%0, %b) : f32[2, 8, 96]
//     return %2                                             return %1
//   }                                                     }
#pragma once

#include "compiler/passes/pass.h"
#include "compiler/passes/recover_util.h"

namespace loom::compiler::passes {

class RecoverLinear : public Pass {
 public:
  explicit RecoverLinear(recover::MatchLog* log = nullptr) : log_(log) {}
  absl::string_view name() const override { return "recover-linear"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override;

 private:
  recover::MatchLog* log_;
};

}  // namespace loom::compiler::passes
