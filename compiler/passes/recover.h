// The recovery passes as one pipeline, for an imported forward graph before
// autodiff (so the backward uses the fused ops' gradient rules):
//
//   recover-positions  gather(table, 0..n-1)           -> table            recover_positions.h
//   recover-linear     matmul(x, permute(W)) [+ b]     -> matmul{trans_b} [+ b]  recover_linear.h
//   recover-norms      decomposed LayerNorm / RMSNorm  -> layernorm / rmsnorm    recover_norms.h
//   recover-gelu       erf and tanh forms              -> gelu                   recover_gelu.h
//   recover-attention  matmul, scale, mask, softmax, matmul -> sdpa              recover_attention.h
//   dce, then const inputs no node reads any more are dropped (from the graph
//   and from the table: a causal mask buffer, once sdpa has is_causal).
//
//   recover::ConstantTable consts = imported.initial;
//   LOOM_ASSIGN_OR_RETURN(recover::MatchLog log, RecoverFastOps(graph, consts));
//   // log: one line per match, e.g. "layernorm: %h.0.ln_1.weight, %h.0.ln_1.bias, eps 1e-05 over f32[8, 256, 256]"
//
// Parameter inputs are never renamed, removed or reshaped.
#pragma once

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "compiler/passes/recover_util.h"

namespace loom::compiler::passes {

absl::StatusOr<recover::MatchLog> RecoverFastOps(ir::Graph& g, recover::ConstantTable& consts);

}  // namespace loom::compiler::passes
