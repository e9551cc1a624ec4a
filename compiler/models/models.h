// Model families, built as forward graphs from a ModelSpec.
//
//   gpt:   GPT-2: learned positions, pre-LayerNorm, tanh-GELU MLP, tied
//          embeddings (logits = h @ wte^T).
//   llama: RMSNorm, RoPE (interleaved pairs), SwiGLU MLP, grouped-query
//          attention, untied output projection.
//
// The graph takes the parameters (InputKind::kParam, named as in
// tests/parity/gpt_torch.py, linear weights stored [in, out]) and two inputs,
// "x" and "y" (i32 [batch, seq_len] token ids and next-token targets), and
// returns the mean cross-entropy loss (f32[]) as output 0 and, when asked, the
// logits ([batch * seq_len, vocab]) as output 1. With dropout it also reads
// "step" (BuildOptions).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "compiler/ir/ir.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::compiler::models {

struct ParamInfo {
  std::string name;
  Shape shape;
  double init_std = 0.02;  // normal(0, std); 0 with init_value for norms and biases
  double init_value = 0;
  bool weight_decay = false;  // decayed by AdamW (matrices only)
};

// Every parameter of the model, in graph-input order. Errors name the bad key.
absl::StatusOr<std::vector<ParamInfo>> Parameters(const v1::ModelSpec& spec);
int64_t NumParameters(const std::vector<ParamInfo>& params);

struct BuildOptions {
  int64_t batch = 1;
  bool return_logits = false;
  // Dropout probability in [0, 1) (model.dropout) on the embeddings (after
  // gpt's position add), on each residual branch (the attention and MLP
  // outputs before they are added to the stream) and on the attention
  // probabilities; 0 adds no node and keeps the fused causal sdpa. With p > 0
  // the graph reads an f32[] input %step, the optimizer step it shares with
  // AdamW (compiler/optimizer.h), as every mask's offset: site k's mask is
  // Philox(DropoutSeed(dropout_seed, k), step) over the element index of the
  // whole (global) tensor, so a step's masks depend only on the seed, the step
  // and the batch, never on the process layout, and a restarted run draws the
  // same ones. Sites: 0 the embeddings, 1 + 2i block i's attention output,
  // 2 + 2i its MLP output, 1 + 2L + i its attention probabilities. For the
  // last, attention is written out (matmul, scale, causal where, softmax,
  // dropout, matmul; kv heads repeated for grouped-query attention) so the
  // probabilities [B, H, T, T] are one tensor whose element index is the
  // global (batch, head, query, key) position. Training graphs only:
  // evaluation builds without it. In a parallel job the dropout op's sharding
  // rule is replicated (compiler/spmd/rules.cc), so each site gathers its
  // tensor over dp (and over tp for the heads and sequence parallelism) and
  // the ops after it run on the whole tensor: the masks are the one-process
  // masks, at the cost of the compute split.
  double dropout = 0;
  uint64_t dropout_seed = 0;
};

// A job's training graph: batch train.batch_size, dropout model.dropout
// seeded by train.seed.
BuildOptions TrainingOptions(const v1::JobSpec& spec);

// The transformer block a parameter belongs to ("h.3.attn.c_attn.weight",
// "layers.3.attention.wq": 3), or -1 (embeddings, final norm, output): the
// blocks of activation checkpointing (compiler/passes/checkpointing.h).
int BlockOfParameter(const std::string& name);

// The seed of dropout site `site` (see BuildOptions): a bijective mix of
// (seed, site), so sites draw unrelated masks.
uint64_t DropoutSeed(uint64_t seed, int64_t site);

absl::StatusOr<ir::Graph> BuildForward(const v1::ModelSpec& spec, const BuildOptions& opts);

// Initial parameter values, deterministic in `seed` (GPT-2 style init: normal
// with std 0.02, residual projections scaled by 1/sqrt(2 * n_layer)).
std::map<std::string, Tensor> InitParameters(const std::vector<ParamInfo>& params, uint64_t seed);
// params[index]'s initial value alone, the same as InitParameters gives it,
// filled by `threads` threads (the values do not depend on the count): for
// models whose parameters should not all be on the host at once.
Tensor InitParameter(const std::vector<ParamInfo>& params, size_t index, uint64_t seed, int threads = 1);

}  // namespace loom::compiler::models
