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
// logits ([batch * seq_len, vocab]) as output 1.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "compiler/ir/ir.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::models {

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
};

absl::StatusOr<compiler::Graph> BuildForward(const v1::ModelSpec& spec, const BuildOptions& opts);

// Initial parameter values, deterministic in `seed` (GPT-2 style init: normal
// with std 0.02, residual projections scaled by 1/sqrt(2 * n_layer)).
std::map<std::string, Tensor> InitParameters(const std::vector<ParamInfo>& params, uint64_t seed);

}  // namespace loom::models
