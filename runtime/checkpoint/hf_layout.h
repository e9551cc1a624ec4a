// Weight layouts of other tools, mapped onto the parameters of Loom's model
// families: for starting a run from a pretrained file (`init_from:` in the job
// spec, `loom train --init`) and for writing parameters back in Hugging Face's
// layout (`loom export --format hf`).
//
//   Loom       the names of compiler/models (`wte`, `h.0.attn.c_attn.weight`,
//              `layers.0.attention.wq`, ...), every tensor as the model holds it;
//              one to one (PlanOneToOne, also the rule for an imported ONNX
//              graph's initializers).
//   HF GPT-2   GPT2LMHeadModel's state_dict: `transformer.wte.weight`,
//              `transformer.h.N.attn.c_attn.weight`, ... Files on the hub drop the
//              `transformer.` prefix; both spellings are read. Conv1D stores its
//              weight [in, out] as Loom does, so nothing is transposed.
//              `lm_head.weight` is tied to wte: it may be absent, and when present
//              it must equal wte. wpe may hold more positions than model.seq_len;
//              the first seq_len rows are used.
//   HF Llama   LlamaForCausalLM's state_dict: `model.embed_tokens.weight`,
//              `model.layers.N.self_attn.{q,k,v,o}_proj.weight`,
//              `model.layers.N.mlp.{gate,up,down}_proj.weight`,
//              `model.layers.N.{input,post_attention}_layernorm.weight`,
//              `model.norm.weight`, `lm_head.weight`. nn.Linear stores
//              [out, in]: every projection is transposed. Hugging Face applies
//              RoPE with rotate_half (pairs (i, i + D/2) of a head of D), Loom on
//              interleaved pairs (2i, 2i + 1); so within each head of q_proj and
//              k_proj, Hugging Face's row c * D/2 + i is Loom's column 2i + c.
//
// Buffers some checkpoints carry (`attn.bias`, `attn.masked_bias`,
// `rotary_emb.inv_freq`) and Loom's AdamW moments (`<param>.m`, `<param>.v`)
// are accepted and ignored. Sizes come from the file and are checked against
// the model spec; a difference names the spec field (model.vocab,
// model.n_layer, ...). n_head, norm_eps and rope_theta cannot be read from the
// shapes: InitSource checks them against the config.json beside the file when
// there is one (CheckHfConfig); without it they must match by hand.
//
//   LOOM_ASSIGN_OR_RETURN(InitPlan plan, PlanInit(reader.index(), spec.model(), "init_from: x.safetensors"));
//   for (const ParamSource& s : plan.params) { ... LoomBlock(s, read_rect, offsets, lengths) ... }
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "compiler/models/models.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {

enum class WeightLayout { kLoom, kHfGpt2, kHfLlama };
absl::string_view WeightLayoutName(WeightLayout layout);  // "Loom", "Hugging Face GPT-2", ...

// Where one model parameter comes from (import) or goes to (export).
struct ParamSource {
  std::string param;                  // Loom's name
  std::string tensor;                 // the tensor's name in the file
  std::vector<int64_t> shape;         // the parameter's shape (Loom's layout)
  std::vector<int64_t> stored_shape;  // the file tensor's shape
  bool transpose = false;             // 2-D: stored [out, in], Loom [in, out]
  int64_t rotary_heads = 0;           // > 0: stored rows in rotate-half order, this many heads
};

struct InitPlan {
  WeightLayout layout = WeightLayout::kLoom;
  std::vector<ParamSource> params;                        // the model's parameters, in order
  std::vector<std::pair<std::string, std::string>> tied;  // (tensor, tensor it must equal)
  std::vector<std::string> ignored;                       // buffers and optimizer moments
  std::vector<std::string> notes;                         // e.g. positions dropped from wpe
};

// Maps the tensors of a file (its safetensors index) onto the model of `spec`.
// Errors are InvalidArgument, prefixed with `label` (e.g. "init_from: PATH"),
// naming the tensor: a missing tensor, a shape that differs (both shapes), a
// non-float dtype, tensors the model has no use for (up to 5 listed), sizes
// that differ from the spec (the field), a layout of the other family.
absl::StatusOr<InitPlan> PlanInit(const SafetensorsIndex& file, const v1::ModelSpec& spec, absl::string_view label);
// The one-to-one rule for any parameter list (Loom's names, ONNX initializers).
absl::StatusOr<InitPlan> PlanOneToOne(const SafetensorsIndex& file,
                                      const std::vector<compiler::models::ParamInfo>& params, absl::string_view label);

// Hugging Face's config.json (its text) against the spec: GPT-2's n_layer,
// n_head, n_embd, vocab_size, n_inner, layer_norm_epsilon and n_positions (at
// least model.seq_len); Llama's num_hidden_layers, num_attention_heads,
// num_key_value_heads, hidden_size, intermediate_size, vocab_size,
// rms_norm_eps and rope_theta. A difference is InvalidArgument naming the spec
// field and the config key; absent keys are not checked.
absl::Status CheckHfConfig(absl::string_view config_json, WeightLayout layout, const v1::ModelSpec& spec,
                           absl::string_view label);

// The Hugging Face names and layouts of a model's parameters (the export
// side): GPT-2 as GPT2LMHeadModel (`transformer.` prefix, plus
// `lm_head.weight` as a second entry for wte), Llama as LlamaForCausalLM.
// stored_shape is the shape written.
absl::StatusOr<std::vector<ParamSource>> HfLayout(const v1::ModelSpec& spec);

// Reads the rectangle [offsets, offsets + lengths) of a stored tensor (any
// float dtype).
using RectReader =
    std::function<absl::StatusOr<Tensor>(const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths)>;
// The rectangle [offsets, offsets + lengths) of parameter `src` in Loom's
// layout (f32, contiguous), reading only the stored rows and columns it needs
// (for rotary-permuted weights, the whole heads it touches).
absl::StatusOr<Tensor> LoomBlock(const ParamSource& src, const RectReader& read, const std::vector<int64_t>& offsets,
                                 const std::vector<int64_t>& lengths);
// The stored layout (f32) of a whole parameter given in Loom's layout.
absl::StatusOr<Tensor> StoredFromLoom(const ParamSource& src, const Tensor& loom);

}  // namespace loom::runtime::checkpoint
