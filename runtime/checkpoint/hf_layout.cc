#include "runtime/checkpoint/hf_layout.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status.h"
#include "nlohmann/json.hpp"

namespace loom::runtime::checkpoint {
namespace {

constexpr absl::string_view kGptPrefix = "transformer.";

absl::Status Bad(absl::string_view label, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(label, ": ", what));
}

std::string Str(const std::vector<int64_t>& shape) { return ShapeToString(shape); }

std::vector<int64_t> Reversed(std::vector<int64_t> s) {
  std::reverse(s.begin(), s.end());
  return s;
}

// The layer index N of "<prefix>N.<rest>", or -1.
int64_t LayerIndex(absl::string_view name, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix)) return -1;
  size_t dot = name.find('.');
  int64_t n = -1;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dot), &n)) return -1;
  return n;
}

bool IsIgnoredBuffer(absl::string_view name, WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kHfGpt2:
      return absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias");
    case WeightLayout::kHfLlama:
      return absl::EndsWith(name, ".rotary_emb.inv_freq");
    case WeightLayout::kLoom:
      return false;
  }
  return false;
}

WeightLayout DetectLayout(const SafetensorsIndex& file) {
  for (const TensorEntry& t : file.tensors) {
    if (t.name == "model.embed_tokens.weight" || absl::StartsWith(t.name, "model.layers."))
      return WeightLayout::kHfLlama;
    if (t.name == "wte.weight" || absl::StartsWith(t.name, kGptPrefix)) return WeightLayout::kHfGpt2;
  }
  return WeightLayout::kLoom;
}

// A tensor by any of its accepted spellings (GPT-2: with or without the prefix).
const TensorEntry* FindStored(const SafetensorsIndex& file, absl::string_view canonical) {
  if (const TensorEntry* e = file.Find(canonical)) return e;
  absl::string_view bare = canonical;
  if (absl::ConsumePrefix(&bare, kGptPrefix)) return file.Find(bare);
  return nullptr;
}

std::string LlamaHfName(const std::string& loom) {
  static const std::map<std::string, std::string> kLayer = {
      {"attention_norm.weight", "input_layernorm.weight"}, {"attention.wq", "self_attn.q_proj.weight"},
      {"attention.wk", "self_attn.k_proj.weight"},         {"attention.wv", "self_attn.v_proj.weight"},
      {"attention.wo", "self_attn.o_proj.weight"},         {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"feed_forward.w1", "mlp.gate_proj.weight"},         {"feed_forward.w3", "mlp.up_proj.weight"},
      {"feed_forward.w2", "mlp.down_proj.weight"}};
  if (loom == "tok_embeddings") return "model.embed_tokens.weight";
  if (loom == "norm.weight") return "model.norm.weight";
  if (loom == "output") return "lm_head.weight";
  int64_t n = LayerIndex(loom, "layers.");
  std::string rest = loom.substr(loom.find('.', 7) + 1);
  return absl::StrCat("model.layers.", n, ".", kLayer.at(rest));
}

// One "<field>: the file's <tensor> ... ; the job has <field> = <value>" check.
absl::Status SizeCheck(absl::string_view label, absl::string_view field, int64_t job, int64_t file,
                       absl::string_view evidence) {
  if (job == file) return absl::OkStatus();
  return Bad(label, absl::StrCat(field, ": the file has ", file, " (", evidence, "); the job has ", field, " = ", job));
}

std::string Evidence(const TensorEntry& t, absl::string_view what) {
  return absl::StrCat(t.name, " is ", Str(t.shape), ", ", what);
}

// Sizes read from the file against the spec, so that a difference names the
// spec field rather than a tensor.
absl::Status CheckSizes(const SafetensorsIndex& file, const v1::ModelSpec& spec, WeightLayout layout,
                        absl::string_view label) {
  const bool gpt = layout == WeightLayout::kHfGpt2;
  const TensorEntry* emb = FindStored(file, gpt ? "transformer.wte.weight" : "model.embed_tokens.weight");
  if (emb != nullptr && emb->shape.size() == 2) {
    LOOM_RETURN_IF_ERROR(
        SizeCheck(label, "model.vocab", spec.vocab(), emb->shape[0], Evidence(*emb, "[vocab, d_model]")));
    LOOM_RETURN_IF_ERROR(
        SizeCheck(label, "model.d_model", spec.d_model(), emb->shape[1], Evidence(*emb, "[vocab, d_model]")));
  }
  int64_t layers = 0;
  for (const TensorEntry& t : file.tensors) {
    int64_t n = gpt ? std::max(LayerIndex(t.name, "h."), LayerIndex(t.name, "transformer.h."))
                    : LayerIndex(t.name, "model.layers.");
    layers = std::max(layers, n + 1);
  }
  const std::string p = gpt ? "h." : "model.layers.";
  LOOM_RETURN_IF_ERROR(SizeCheck(
      label, "model.n_layer", spec.n_layer(), layers,
      layers == 0 ? absl::StrCat("no ", p, "N.* tensors") : absl::StrCat("layers ", p, "0 to ", p, layers - 1)));
  const TensorEntry* fc =
      FindStored(file, gpt ? "transformer.h.0.mlp.c_fc.weight" : "model.layers.0.mlp.gate_proj.weight");
  if (fc != nullptr && fc->shape.size() == 2) {
    const int64_t f = fc->shape[gpt ? 1 : 0];
    LOOM_RETURN_IF_ERROR(SizeCheck(label, "model.ffn_hidden",
                                   spec.ffn_hidden() > 0 ? spec.ffn_hidden() : 4 * spec.d_model(), f,
                                   Evidence(*fc, gpt ? "[d_model, ffn_hidden]" : "[ffn_hidden, d_model]")));
  }
  if (gpt) {
    const TensorEntry* wpe = FindStored(file, "transformer.wpe.weight");
    if (wpe != nullptr && wpe->shape.size() == 2 && wpe->shape[0] < spec.seq_len())
      return Bad(label, absl::StrCat("model.seq_len: the file has ", wpe->shape[0], " positions (", wpe->name, " is ",
                                     Str(wpe->shape), "); the job has model.seq_len = ", spec.seq_len()));
    return absl::OkStatus();
  }
  const TensorEntry* k = file.Find("model.layers.0.self_attn.k_proj.weight");
  const int64_t head_dim = spec.d_model() / spec.n_head();
  if (k != nullptr && k->shape.size() == 2 && head_dim > 0) {
    const int64_t kv = spec.n_kv_head() > 0 ? spec.n_kv_head() : spec.n_head();
    if (k->shape[0] % head_dim != 0)
      return Bad(label,
                 absl::StrCat("model.n_head: ", k->name, " is ", Str(k->shape), ", not whole heads of ", head_dim,
                              " (model.d_model / model.n_head); the job has model.n_head = ", spec.n_head()));
    LOOM_RETURN_IF_ERROR(SizeCheck(label, "model.n_kv_head", kv, k->shape[0] / head_dim,
                                   Evidence(*k, absl::StrCat("key heads of ", head_dim))));
  }
  return absl::OkStatus();
}

absl::Status CheckStored(const ParamSource& s, const TensorEntry& e, bool prefix_rows, absl::string_view label) {
  if (!IsFloating(e.dtype))
    return Bad(label, absl::StrCat("tensor '", e.name, "' has dtype ", SafetensorsDTypeName(e.dtype), "; parameter '",
                                   s.param, "' needs F32, F64, BF16 or F16"));
  const std::vector<int64_t> want = s.transpose ? Reversed(s.shape) : s.shape;
  bool ok = e.shape == want;
  if (prefix_rows && !ok && e.shape.size() == 2 && want.size() == 2)
    ok = e.shape[0] >= want[0] && e.shape[1] == want[1];
  if (ok) return absl::OkStatus();
  return Bad(label, absl::StrCat("tensor '", e.name, "' has shape ", Str(e.shape), "; parameter '", s.param, "' needs ",
                                 Str(want), s.transpose ? absl::StrCat(" (its ", Str(s.shape), " transposed)") : ""));
}

absl::Status RejectUnknown(const SafetensorsIndex& file, const std::set<std::string>& used, absl::string_view label) {
  std::vector<std::string> unknown;
  for (const TensorEntry& t : file.tensors)
    if (!used.count(t.name)) unknown.push_back(absl::StrCat("'", t.name, "'"));
  if (unknown.empty()) return absl::OkStatus();
  const size_t n = unknown.size();
  if (n > 5) unknown.resize(5);
  return Bad(label, absl::StrCat(n, " tensor", n > 1 ? "s" : "", " that the model has no parameter for: ",
                                 absl::StrJoin(unknown, ", "), n > 5 ? absl::StrCat(" and ", n - 5, " more") : ""));
}

}  // namespace

absl::string_view WeightLayoutName(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kLoom:
      return "Loom";
    case WeightLayout::kHfGpt2:
      return "Hugging Face GPT-2";
    case WeightLayout::kHfLlama:
      return "Hugging Face Llama";
  }
  return "?";
}

absl::Status CheckHfConfig(absl::string_view config_json, WeightLayout layout, const v1::ModelSpec& spec,
                           absl::string_view label) {
  if (layout == WeightLayout::kLoom) return absl::OkStatus();
  const nlohmann::json c = nlohmann::json::parse(config_json.begin(), config_json.end(), nullptr, false);
  if (!c.is_object()) return Bad(label, "config.json beside the file is not a JSON object");
  const bool gpt = layout == WeightLayout::kHfGpt2;
  const int64_t ffn = spec.ffn_hidden() > 0 ? spec.ffn_hidden() : 4 * spec.d_model();
  const int64_t kv = spec.n_kv_head() > 0 ? spec.n_kv_head() : spec.n_head();
  const double eps = spec.norm_eps() > 0 ? spec.norm_eps() : 1e-5,
               theta = spec.rope_theta() > 0 ? spec.rope_theta() : 1e4;
  struct Key {
    const char* key;
    const char* field;
    double job;
  };
  const std::vector<Key> keys = gpt ? std::vector<Key>{{"n_layer", "model.n_layer", double(spec.n_layer())},
                                                       {"n_head", "model.n_head", double(spec.n_head())},
                                                       {"n_embd", "model.d_model", double(spec.d_model())},
                                                       {"vocab_size", "model.vocab", double(spec.vocab())},
                                                       {"n_inner", "model.ffn_hidden", double(ffn)},
                                                       {"layer_norm_epsilon", "model.norm_eps", eps}}
                                    : std::vector<Key>{{"num_hidden_layers", "model.n_layer", double(spec.n_layer())},
                                                       {"num_attention_heads", "model.n_head", double(spec.n_head())},
                                                       {"num_key_value_heads", "model.n_kv_head", double(kv)},
                                                       {"hidden_size", "model.d_model", double(spec.d_model())},
                                                       {"intermediate_size", "model.ffn_hidden", double(ffn)},
                                                       {"vocab_size", "model.vocab", double(spec.vocab())},
                                                       {"rms_norm_eps", "model.norm_eps", eps},
                                                       {"rope_theta", "model.rope_theta", theta}};
  for (const Key& k : keys) {
    auto it = c.find(k.key);
    if (it == c.end() || !it->is_number()) continue;  // absent or null: the family default applies
    const double v = it->get<double>();
    if (std::abs(v - k.job) <= 1e-6 * std::max(std::abs(v), std::abs(k.job))) continue;
    return Bad(label, absl::StrCat(k.field, ": config.json beside the file has ", k.key, " = ", v, "; the job has ",
                                   k.field, " = ", k.job));
  }
  auto pos = c.find("n_positions");
  if (gpt && pos != c.end() && pos->is_number_integer() && pos->get<int64_t>() < spec.seq_len())
    return Bad(label, absl::StrCat("model.seq_len: config.json beside the file has n_positions = ", pos->get<int64_t>(),
                                   "; the job has model.seq_len = ", spec.seq_len()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamSource>> HfLayout(const v1::ModelSpec& spec) {
  LOOM_ASSIGN_OR_RETURN(std::vector<compiler::models::ParamInfo> params, compiler::models::Parameters(spec));
  const bool gpt = spec.family() == "gpt";
  const int64_t kv = spec.n_kv_head() > 0 ? spec.n_kv_head() : spec.n_head();
  std::vector<ParamSource> out;
  for (const compiler::models::ParamInfo& p : params) {
    ParamSource s;
    s.param = p.name;
    s.shape.assign(p.shape.begin(), p.shape.end());
    if (gpt) {
      s.tensor = absl::StrCat(kGptPrefix, p.name, p.name == "wte" || p.name == "wpe" ? ".weight" : "");
    } else {
      s.tensor = LlamaHfName(p.name);
      s.transpose = s.shape.size() == 2 && p.name != "tok_embeddings";
      if (absl::EndsWith(p.name, ".attention.wq")) s.rotary_heads = spec.n_head();
      if (absl::EndsWith(p.name, ".attention.wk")) s.rotary_heads = kv;
    }
    s.stored_shape = s.transpose ? Reversed(s.shape) : s.shape;
    out.push_back(std::move(s));
  }
  if (gpt) {  // GPT2LMHeadModel's state_dict holds the tied head under its own name
    ParamSource head = out.front();
    head.tensor = "lm_head.weight";
    out.push_back(std::move(head));
  }
  return out;
}

absl::StatusOr<InitPlan> PlanOneToOne(const SafetensorsIndex& file,
                                      const std::vector<compiler::models::ParamInfo>& params, absl::string_view label) {
  InitPlan plan;
  plan.layout = WeightLayout::kLoom;
  std::set<std::string> used;
  for (const compiler::models::ParamInfo& p : params) {
    ParamSource s;
    s.param = s.tensor = p.name;
    s.shape.assign(p.shape.begin(), p.shape.end());
    s.stored_shape = s.shape;
    const TensorEntry* e = file.Find(p.name);
    if (e == nullptr)
      return Bad(label, absl::StrCat("no tensor '", p.name, "' (", WeightLayoutName(plan.layout), " names)"));
    LOOM_RETURN_IF_ERROR(CheckStored(s, *e, false, label));
    used.insert(p.name);
    for (const char* moment : {".m", ".v"}) {
      if (file.Find(p.name + moment) == nullptr) continue;
      used.insert(p.name + moment);
      plan.ignored.push_back(p.name + moment);
    }
    plan.params.push_back(std::move(s));
  }
  LOOM_RETURN_IF_ERROR(RejectUnknown(file, used, label));
  return plan;
}

absl::StatusOr<InitPlan> PlanInit(const SafetensorsIndex& file, const v1::ModelSpec& spec, absl::string_view label) {
  LOOM_ASSIGN_OR_RETURN(std::vector<compiler::models::ParamInfo> params, compiler::models::Parameters(spec));
  const WeightLayout layout = DetectLayout(file);
  const bool gpt = spec.family() == "gpt";
  if (layout == WeightLayout::kLoom) return PlanOneToOne(file, params, label);
  if (gpt != (layout == WeightLayout::kHfGpt2))
    return Bad(label, absl::StrCat("the file is in the ", WeightLayoutName(layout),
                                   " layout; the job has model.family = ", spec.family()));
  LOOM_RETURN_IF_ERROR(CheckSizes(file, spec, layout, label));
  LOOM_ASSIGN_OR_RETURN(std::vector<ParamSource> sources, HfLayout(spec));
  InitPlan plan;
  plan.layout = layout;
  std::set<std::string> used;
  for (ParamSource& s : sources) {
    const TensorEntry* e = FindStored(file, s.tensor);
    if (s.tensor == "lm_head.weight" && gpt) {  // the tied head: optional, equal to wte
      if (e == nullptr) continue;
      LOOM_RETURN_IF_ERROR(CheckStored(s, *e, false, label));
      plan.tied.emplace_back(e->name, plan.params.front().tensor);
      used.insert(e->name);
      continue;
    }
    if (e == nullptr) {
      absl::string_view bare = s.tensor;
      const bool either = gpt && absl::ConsumePrefix(&bare, kGptPrefix);
      return Bad(label, absl::StrCat("no tensor '", s.tensor, "'", either ? absl::StrCat(" or '", bare, "'") : "",
                                     " for parameter '", s.param, "' (", WeightLayoutName(layout), " names)"));
    }
    const bool wpe = gpt && s.param == "wpe";
    LOOM_RETURN_IF_ERROR(CheckStored(s, *e, wpe, label));
    if (wpe && e->shape[0] > s.shape[0])
      plan.notes.push_back(
          absl::StrCat(e->name, ": using the first ", s.shape[0], " of ", e->shape[0], " positions (model.seq_len)"));
    s.tensor = e->name;
    s.stored_shape = e->shape;
    used.insert(e->name);
    plan.params.push_back(std::move(s));
  }
  for (const TensorEntry& t : file.tensors) {
    if (!IsIgnoredBuffer(t.name, layout) || used.count(t.name)) continue;
    used.insert(t.name);
    plan.ignored.push_back(t.name);
  }
  LOOM_RETURN_IF_ERROR(RejectUnknown(file, used, label));
  return plan;
}

namespace {

// [heads * D, X] rows between rotate-half order (c * D/2 + i within a head)
// and interleaved order (2i + c).
absl::StatusOr<Tensor> PermuteHeadRows(const Tensor& rows, int64_t head_dim, bool to_interleaved) {
  const int64_t n = rows.dim(0), x = rows.dim(1), heads = n / head_dim, half = head_dim / 2;
  std::vector<int64_t> split =
      to_interleaved ? std::vector<int64_t>{heads, 2, half, x} : std::vector<int64_t>{heads, half, 2, x};
  LOOM_ASSIGN_OR_RETURN(Tensor v, rows.Contiguous().Reshape(split));
  const int perm[] = {0, 2, 1, 3};
  return v.Permute(perm).Clone().Reshape({n, x});
}

}  // namespace

absl::StatusOr<Tensor> LoomBlock(const ParamSource& src, const RectReader& read, const std::vector<int64_t>& offsets,
                                 const std::vector<int64_t>& lengths) {
  const size_t nd = src.shape.size();
  if (offsets.size() != nd || lengths.size() != nd)
    return absl::InvalidArgumentError(absl::StrCat("'", src.param, "': a block needs ", nd, " offsets and lengths"));
  for (size_t d = 0; d < nd; ++d)
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > src.shape[d])
      return absl::InvalidArgumentError(absl::StrCat("'", src.param, "': block dim ", d, " [", offsets[d], ", +",
                                                     lengths[d], ") is outside ", Str(src.shape)));
  if (!src.transpose) {
    LOOM_ASSIGN_OR_RETURN(Tensor t, read(offsets, lengths));
    return t.To(DType::kF32).Contiguous();
  }
  if (nd != 2) return absl::InternalError(absl::StrCat("'", src.param, "': only 2-D weights are transposed"));
  // Loom [in, out] block (rows r, columns c) = stored [out, in] block (rows c, columns r), transposed.
  int64_t row0 = offsets[1], rows = lengths[1];
  const int64_t head_dim = src.rotary_heads > 0 ? src.shape[1] / src.rotary_heads : 0;
  if (head_dim > 0) {  // whole heads: the permutation stays inside a head
    const int64_t h0 = offsets[1] / head_dim, h1 = (offsets[1] + lengths[1] + head_dim - 1) / head_dim;
    row0 = h0 * head_dim;
    rows = (h1 - h0) * head_dim;
  }
  LOOM_ASSIGN_OR_RETURN(Tensor stored, read({row0, offsets[0]}, {rows, lengths[0]}));
  Tensor t = stored.To(DType::kF32);
  if (head_dim > 0) {
    LOOM_ASSIGN_OR_RETURN(t, PermuteHeadRows(t, head_dim, /*to_interleaved=*/true));
  }
  return t.Transpose(0, 1).Narrow(1, offsets[1] - row0, lengths[1]).Clone();
}

absl::StatusOr<Tensor> StoredFromLoom(const ParamSource& src, const Tensor& loom) {
  std::vector<int64_t> shape(loom.shape().begin(), loom.shape().end());
  if (shape != src.shape)
    return absl::InvalidArgumentError(absl::StrCat("'", src.param, "' is ", Str(shape), "; expected ", Str(src.shape)));
  Tensor t = loom.To(DType::kF32);
  if (!src.transpose) return t.Clone();
  t = t.Transpose(0, 1).Clone();
  if (src.rotary_heads > 0) return PermuteHeadRows(t, src.shape[1] / src.rotary_heads, /*to_interleaved=*/false);
  return t;
}

}  // namespace loom::runtime::checkpoint
