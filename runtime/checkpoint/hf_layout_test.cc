// The Hugging Face name and layout mapping (hf_layout.h) and reading initial
// parameters from files (init_from.h).
//
// The full-size cases use header-only indexes (no data): Hugging Face's gpt2
// checkpoint (124M parameters, the hub file's exact names and shapes) and a
// Llama-2-7B-shaped one. Numeric cases use small models with the same names.
#include "runtime/checkpoint/hf_layout.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/checkpoint/init_from.h"
#include "runtime/checkpoint/test_util.h"

namespace loom::runtime::checkpoint {
namespace {

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "F32";
};

// A header-only index: offsets laid out back to back, no data behind them.
SafetensorsIndex Index(const std::vector<Entry>& entries) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t pos = 0;
  for (const Entry& e : entries) {
    uint64_t n = e.dtype == "F32" || e.dtype == "I32" ? 4 : e.dtype == "F64" || e.dtype == "I64" ? 8 : 2;
    for (int64_t d : e.shape) n *= d;
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {pos, pos + n}}};
    pos += n;
  }
  auto idx = ParseSafetensorsHeader(h.dump(), pos, "test");
  EXPECT_TRUE(idx.ok()) << idx.status();
  return *idx;
}

// Hugging Face's gpt2 model.safetensors: names without `transformer.`, the
// causal-mask buffer attn.bias in every layer, no lm_head.weight.
std::vector<Entry> Gpt2Hub(const std::string& prefix = "", int64_t layers = 12) {
  const int64_t C = 768;
  std::vector<Entry> e;
  for (int64_t i = 0; i < layers; ++i) {
    std::string h = absl::StrCat(prefix, "h.", i, ".");
    e.push_back({h + "attn.bias", {1, 1, 1024, 1024}});
    e.push_back({h + "attn.c_attn.bias", {3 * C}});
    e.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
    e.push_back({h + "attn.c_proj.bias", {C}});
    e.push_back({h + "attn.c_proj.weight", {C, C}});
    e.push_back({h + "ln_1.bias", {C}});
    e.push_back({h + "ln_1.weight", {C}});
    e.push_back({h + "ln_2.bias", {C}});
    e.push_back({h + "ln_2.weight", {C}});
    e.push_back({h + "mlp.c_fc.bias", {4 * C}});
    e.push_back({h + "mlp.c_fc.weight", {C, 4 * C}});
    e.push_back({h + "mlp.c_proj.bias", {C}});
    e.push_back({h + "mlp.c_proj.weight", {4 * C, C}});
  }
  e.push_back({prefix + "ln_f.bias", {C}});
  e.push_back({prefix + "ln_f.weight", {C}});
  e.push_back({prefix + "wpe.weight", {1024, C}});
  e.push_back({prefix + "wte.weight", {50257, C}});
  return e;
}

v1::ModelSpec Gpt2Spec() {
  v1::ModelSpec m;
  m.set_family("gpt");
  m.set_n_layer(12);
  m.set_n_head(12);
  m.set_d_model(768);
  m.set_seq_len(1024);
  m.set_vocab(50257);
  m.set_ffn_hidden(3072);
  return m;
}

std::vector<Entry> Llama7bShapes() {
  const int64_t C = 4096, F = 11008;
  std::vector<Entry> e = {{"model.embed_tokens.weight", {32000, C}, "F16"}};
  for (int64_t i = 0; i < 32; ++i) {
    std::string l = absl::StrCat("model.layers.", i, ".");
    for (const char* p : {"q", "k", "v", "o"})
      e.push_back({absl::StrCat(l, "self_attn.", p, "_proj.weight"), {C, C}, "F16"});
    e.push_back({l + "self_attn.rotary_emb.inv_freq", {64}, "F32"});
    e.push_back({l + "mlp.gate_proj.weight", {F, C}, "F16"});
    e.push_back({l + "mlp.up_proj.weight", {F, C}, "F16"});
    e.push_back({l + "mlp.down_proj.weight", {C, F}, "F16"});
    e.push_back({l + "input_layernorm.weight", {C}, "F16"});
    e.push_back({l + "post_attention_layernorm.weight", {C}, "F16"});
  }
  e.push_back({"model.norm.weight", {C}, "F16"});
  e.push_back({"lm_head.weight", {32000, C}, "F16"});
  return e;
}

v1::ModelSpec Llama7bSpec() {
  v1::ModelSpec m;
  m.set_family("llama");
  m.set_n_layer(32);
  m.set_n_head(32);
  m.set_n_kv_head(32);
  m.set_d_model(4096);
  m.set_seq_len(4096);
  m.set_vocab(32000);
  m.set_ffn_hidden(11008);
  return m;
}

std::string ErrorOf(const std::vector<Entry>& file, const v1::ModelSpec& spec) {
  auto plan = PlanInit(Index(file), spec, "init_from: x.safetensors");
  if (plan.ok()) return "";
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
  EXPECT_EQ(plan.status().message().find("init_from: x.safetensors: "), 0u) << plan.status();
  return std::string(plan.status().message());
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(HfLayout, Gpt2HubCheckpointMapsOntoTheGptFamily) {
  for (const std::string prefix : {"", "transformer."}) {
    std::vector<Entry> file = Gpt2Hub(prefix);
    if (!prefix.empty()) file.push_back({"lm_head.weight", {50257, 768}});
    auto plan = PlanInit(Index(file), Gpt2Spec(), "init_from: gpt2");
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->layout, WeightLayout::kHfGpt2);
    ASSERT_EQ(plan->params.size(), 2u + 12 * 12 + 2);
    EXPECT_EQ(plan->ignored.size(), 12u);  // the attn.bias buffers
    EXPECT_EQ(plan->tied.size(), prefix.empty() ? 0u : 1u);
    EXPECT_TRUE(plan->notes.empty());
    int64_t total = 0;
    for (const ParamSource& s : plan->params) {
      EXPECT_FALSE(s.transpose) << s.param;  // Conv1D is [in, out], as Loom
      EXPECT_EQ(s.stored_shape, s.shape) << s.param;
      total += NumElements(s.shape);
    }
    EXPECT_EQ(total, 124439808);  // GPT-2 small's parameter count
    EXPECT_EQ(plan->params[0].param, "wte");
    EXPECT_EQ(plan->params[0].tensor, prefix + "wte.weight");
    EXPECT_EQ(plan->params[4].param, "h.0.attn.c_attn.weight");
    EXPECT_EQ(plan->params[4].tensor, prefix + "h.0.attn.c_attn.weight");
  }
  // A shorter context takes wpe's first rows, and says so.
  v1::ModelSpec shorter = Gpt2Spec();
  shorter.set_seq_len(256);
  auto plan = PlanInit(Index(Gpt2Hub()), shorter, "init_from: gpt2");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->params[1].shape, (std::vector<int64_t>{256, 768}));
  EXPECT_EQ(plan->params[1].stored_shape, (std::vector<int64_t>{1024, 768}));
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_HAS(plan->notes[0], "first 256 of 1024 positions");
}

TEST(HfLayout, SizesThatDifferNameTheSpecField) {
  v1::ModelSpec m = Gpt2Spec();
  m.set_vocab(256);
  std::string e = ErrorOf(Gpt2Hub(), m);
  EXPECT_HAS(e, "model.vocab: the file has 50257 (wte.weight is [50257, 768]");
  EXPECT_HAS(e, "the job has model.vocab = 256");
  m = Gpt2Spec();
  m.set_d_model(384);
  m.set_ffn_hidden(1536);
  EXPECT_HAS(ErrorOf(Gpt2Hub(), m), "model.d_model: the file has 768");
  m = Gpt2Spec();
  m.set_n_layer(2);
  EXPECT_HAS(ErrorOf(Gpt2Hub(), m),
             "model.n_layer: the file has 12 (layers h.0 to h.11); the job has model.n_layer = 2");
  m = Gpt2Spec();
  m.set_ffn_hidden(2048);
  EXPECT_HAS(ErrorOf(Gpt2Hub(), m), "model.ffn_hidden: the file has 3072");
  m = Gpt2Spec();
  m.set_seq_len(2048);
  EXPECT_HAS(ErrorOf(Gpt2Hub(), m), "model.seq_len: the file has 1024 positions");
  v1::ModelSpec l = Llama7bSpec();
  l.set_n_kv_head(8);
  EXPECT_HAS(ErrorOf(Llama7bShapes(), l), "model.n_kv_head: the file has 32");
  EXPECT_HAS(ErrorOf(Llama7bShapes(), Gpt2Spec()), "Hugging Face Llama layout; the job has model.family = gpt");
  EXPECT_HAS(ErrorOf(Gpt2Hub(), Llama7bSpec()), "Hugging Face GPT-2 layout; the job has model.family = llama");
}

TEST(HfLayout, BadTensorsAreNamed) {
  std::vector<Entry> f = Gpt2Hub();
  f.erase(f.begin() + 3 * 13 + 8);  // h.3.ln_2.weight
  EXPECT_HAS(ErrorOf(f, Gpt2Spec()),
             "no tensor 'transformer.h.3.ln_2.weight' or 'h.3.ln_2.weight' for parameter 'h.3.ln_2.weight'");
  f = Gpt2Hub();
  f[4].shape = {768, 769};  // h.0.attn.c_proj.weight
  EXPECT_HAS(ErrorOf(f, Gpt2Spec()),
             "tensor 'h.0.attn.c_proj.weight' has shape [768, 769]; parameter "
             "'h.0.attn.c_proj.weight' needs [768, 768]");
  f = Gpt2Hub();
  f[6].dtype = "I64";  // h.0.ln_1.weight
  EXPECT_HAS(ErrorOf(f, Gpt2Spec()), "tensor 'h.0.ln_1.weight' has dtype I64");
  f = Gpt2Hub();
  for (int i = 0; i < 7; ++i) f.push_back({absl::StrCat("extra.", i), {2}});
  std::string e = ErrorOf(f, Gpt2Spec());
  EXPECT_HAS(e,
             "7 tensors that the model has no parameter for: 'extra.0', 'extra.1', 'extra.2', 'extra.3', "
             "'extra.4' and 2 more");
  f = Gpt2Hub();
  f.push_back({"lm_head.weight", {50257, 700}});
  EXPECT_HAS(ErrorOf(f, Gpt2Spec()), "tensor 'lm_head.weight' has shape [50257, 700]");
  std::vector<Entry> l = Llama7bShapes();
  l[1].shape = {4096, 4000};  // layer 0 q_proj
  EXPECT_HAS(ErrorOf(l, Llama7bSpec()),
             "tensor 'model.layers.0.self_attn.q_proj.weight' has shape [4096, 4000]; "
             "parameter 'layers.0.attention.wq' needs [4096, 4096]");
  l = Llama7bShapes();
  l.pop_back();  // lm_head.weight
  EXPECT_HAS(ErrorOf(l, Llama7bSpec()), "no tensor 'lm_head.weight' for parameter 'output'");
}

TEST(HfLayout, ConfigJsonIsCheckedAgainstTheSpec) {
  // gpt2's config.json on the hub (the keys Loom reads; n_inner null).
  const std::string gpt2 = R"({"activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
      "n_inner": null, "n_layer": 12, "n_positions": 1024, "layer_norm_epsilon": 1e-05, "vocab_size": 50257})";
  v1::ModelSpec m = Gpt2Spec();
  EXPECT_TRUE(CheckHfConfig(gpt2, WeightLayout::kHfGpt2, m, "init_from: g").ok());
  m.set_norm_eps(1e-5f);  // as ApplyDefaults stores it (f32)
  EXPECT_TRUE(CheckHfConfig(gpt2, WeightLayout::kHfGpt2, m, "init_from: g").ok());
  m.set_n_head(16);
  auto s = CheckHfConfig(gpt2, WeightLayout::kHfGpt2, m, "init_from: g");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(std::string(s.message()),
             "init_from: g: model.n_head: config.json beside the file has n_head = 12; "
             "the job has model.n_head = 16");
  m = Gpt2Spec();
  m.set_seq_len(2048);
  EXPECT_HAS(std::string(CheckHfConfig(gpt2, WeightLayout::kHfGpt2, m, "x").message()), "n_positions = 1024");
  const std::string llama = R"({"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
      "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
      "vocab_size": 32000})";
  v1::ModelSpec l = Llama7bSpec();
  EXPECT_HAS(std::string(CheckHfConfig(llama, WeightLayout::kHfLlama, l, "x").message()),
             "model.norm_eps: config.json beside the file has rms_norm_eps = 1e-06");
  l.set_norm_eps(1e-6f);
  EXPECT_TRUE(CheckHfConfig(llama, WeightLayout::kHfLlama, l, "x").ok());
  l.set_rope_theta(500000);
  EXPECT_HAS(std::string(CheckHfConfig(llama, WeightLayout::kHfLlama, l, "x").message()), "model.rope_theta");
  EXPECT_HAS(std::string(CheckHfConfig("[1]", WeightLayout::kHfLlama, l, "x").message()), "not a JSON object");
}

TEST(HfLayout, Llama7bShapedCheckpointMapsWithTransposesAndRotaryHeads) {
  auto plan = PlanInit(Index(Llama7bShapes()), Llama7bSpec(), "init_from: llama");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->layout, WeightLayout::kHfLlama);
  EXPECT_EQ(plan->ignored.size(), 32u);  // rotary_emb.inv_freq
  std::map<std::string, ParamSource> by;
  for (const ParamSource& s : plan->params) by[s.param] = s;
  EXPECT_EQ(by["tok_embeddings"].tensor, "model.embed_tokens.weight");
  EXPECT_FALSE(by["tok_embeddings"].transpose);
  EXPECT_EQ(by["layers.5.attention.wq"].tensor, "model.layers.5.self_attn.q_proj.weight");
  EXPECT_EQ(by["layers.5.attention.wq"].rotary_heads, 32);
  EXPECT_EQ(by["layers.5.attention.wk"].rotary_heads, 32);
  EXPECT_EQ(by["layers.5.attention.wv"].rotary_heads, 0);
  EXPECT_EQ(by["layers.5.feed_forward.w1"].tensor, "model.layers.5.mlp.gate_proj.weight");
  EXPECT_EQ(by["layers.5.feed_forward.w2"].shape, (std::vector<int64_t>{11008, 4096}));
  EXPECT_EQ(by["layers.5.feed_forward.w2"].stored_shape, (std::vector<int64_t>{4096, 11008}));
  EXPECT_TRUE(by["output"].transpose);
  EXPECT_EQ(by["layers.31.ffn_norm.weight"].tensor, "model.layers.31.post_attention_layernorm.weight");
}

TEST(HfLayout, LoomNamesMapOneToOneAndIgnoreMoments) {
  v1::ModelSpec m;
  m.set_family("gpt");
  m.set_n_layer(1);
  m.set_n_head(2);
  m.set_d_model(8);
  m.set_seq_len(4);
  m.set_vocab(16);
  auto params = compiler::models::Parameters(m);
  ASSERT_TRUE(params.ok());
  std::vector<Entry> f;
  for (const auto& p : *params) {
    std::vector<int64_t> s(p.shape.begin(), p.shape.end());
    f.push_back({p.name, s});
    f.push_back({p.name + ".m", s});
    f.push_back({p.name + ".v", s});
  }
  auto plan = PlanInit(Index(f), m, "init_from: loom");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->layout, WeightLayout::kLoom);
  EXPECT_EQ(plan->params.size(), params->size());
  EXPECT_EQ(plan->ignored.size(), 2 * params->size());
  f.push_back({"h.7.ln_1.weight", {8}});
  EXPECT_HAS(ErrorOf(f, m), "1 tensor that the model has no parameter for: 'h.7.ln_1.weight'");
}

// Within a head of D rows, Hugging Face's row c * D/2 + i is Loom's column 2i + c.
TEST(HfLayout, RotaryRowsBecomeInterleavedColumns) {
  ParamSource s;
  s.param = "layers.0.attention.wq";
  s.shape = {2, 8};  // [in, out]: 2 heads of D = 4
  s.stored_shape = {8, 2};
  s.transpose = true;
  s.rotary_heads = 2;
  Tensor stored = Tensor::MustEmpty({8, 2}, DType::kF32);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 2; ++c) stored.data<float>()[r * 2 + c] = static_cast<float>(10 * r + c);
  RectReader read = [&](const std::vector<int64_t>& o, const std::vector<int64_t>& l) -> absl::StatusOr<Tensor> {
    return stored.Narrow(0, o[0], l[0]).Narrow(1, o[1], l[1]).Clone();
  };
  auto loom = LoomBlock(s, read, {0, 0}, {2, 8});
  ASSERT_TRUE(loom.ok()) << loom.status();
  // Head rows in rotate-half order (0, 1 | 2, 3) -> pairs (0, 2), (1, 3) -> columns 0, 2, 1, 3.
  const int order[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(loom->data<float>()[i * 8 + j], 10 * order[j] + i) << i << "," << j;
  auto back = StoredFromLoom(s, *loom);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(testing::BitwiseEqual(*back, stored));
}

Tensor Random(const std::vector<int64_t>& shape, uint64_t seed) {
  Tensor t = Tensor::MustEmpty(shape, DType::kF32);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng.Normal(i));
  return t;
}

v1::ModelSpec SmallLlama() {
  v1::ModelSpec m;
  m.set_family("llama");
  m.set_n_layer(2);
  m.set_n_head(4);
  m.set_n_kv_head(2);
  m.set_d_model(32);
  m.set_seq_len(8);
  m.set_vocab(40);
  m.set_ffn_hidden(48);
  return m;
}

// Writes a model's parameters in Hugging Face's layout (StoredFromLoom), some
// tensors as bf16, reads them back whole and as random blocks.
TEST(InitSource, ReadsEveryBlockBackInLoomLayout) {
  const v1::ModelSpec m = SmallLlama();
  auto layout = HfLayout(m);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::map<std::string, Tensor> loom;
  std::vector<Tensor> stored;
  std::vector<TensorToWrite> w;
  uint64_t seed = 1;
  for (const ParamSource& s : *layout) {
    Tensor t = Random(s.shape, seed++);
    const bool bf16 = seed % 3 == 0;
    if (bf16) t = t.To(DType::kBF16).To(DType::kF32);  // exactly representable
    loom[s.param] = t;
    auto st = StoredFromLoom(s, t);
    ASSERT_TRUE(st.ok()) << st.status();
    stored.push_back(bf16 ? st->To(DType::kBF16) : *st);
    w.push_back({s.tensor, stored.back().dtype(), s.stored_shape, stored.back().raw_data()});
  }
  const std::string path = testing::FreshDir("init_from") + "/llama.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, w, {{"format", "pt"}}).ok());
  auto src = InitSource::Open(path, m);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->plan().layout, WeightLayout::kHfLlama);
  EXPECT_HAS((*src)->Describe(), "Hugging Face Llama names, 21 parameters");
  auto all = (*src)->ReadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  for (const auto& [name, t] : loom) EXPECT_TRUE(testing::BitwiseEqual(all->at(name), t)) << name;
  Philox rng(7, 0);
  int64_t draw = 0;
  for (const auto& [name, t] : loom) {
    for (int k = 0; k < 6; ++k) {
      std::vector<int64_t> off, len;
      for (int d = 0; d < t.ndim(); ++d) {
        int64_t a = static_cast<int64_t>(rng.Uniform(draw++) * t.dim(d));
        int64_t b = static_cast<int64_t>(rng.Uniform(draw++) * t.dim(d));
        off.push_back(std::min(a, b));
        len.push_back(std::max(a, b) - std::min(a, b) + 1);
        if (off.back() + len.back() > t.dim(d)) len.back() = t.dim(d) - off.back();
      }
      auto block = (*src)->ReadBlock(name, off, len);
      ASSERT_TRUE(block.ok()) << block.status();
      Tensor want = t;
      for (int d = 0; d < t.ndim(); ++d) want = want.Narrow(d, off[d], len[d]);
      EXPECT_TRUE(testing::BitwiseEqual(*block, want.Clone())) << name << " block " << k;
    }
  }
  EXPECT_EQ((*src)->ReadBlock("output", {0, 0}, {33, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*src)->Read("nope").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InitSource, OneToOneForAnyParameterList) {
  const std::vector<compiler::models::ParamInfo> params = {{"fc.weight", {3, 4}}, {"fc.bias", {4}}};
  Tensor w = Random({3, 4}, 1), b = Random({4}, 2);
  const std::string dir = testing::FreshDir("one_to_one");
  ASSERT_TRUE(WriteSafetensors(
                  dir + "/m.safetensors",
                  {{"fc.weight", DType::kF32, {3, 4}, w.raw_data()}, {"fc.bias", DType::kF32, {4}, b.raw_data()}}, {})
                  .ok());
  auto src = InitSource::OpenOneToOne(dir + "/m.safetensors", params);
  ASSERT_TRUE(src.ok()) << src.status();
  auto block = (*src)->ReadBlock("fc.weight", {1, 2}, {2, 2});
  ASSERT_TRUE(block.ok());
  EXPECT_TRUE(testing::BitwiseEqual(*block, w.Narrow(0, 1, 2).Narrow(1, 2, 2).Clone()));
  auto bad = InitSource::OpenOneToOne(dir + "/m.safetensors", {{"fc.weight", {4, 3}}, {"fc.bias", {4}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_HAS(std::string(bad.status().message()),
             "tensor 'fc.weight' has shape [3, 4]; parameter 'fc.weight' needs [4, 3]");
}

TEST(InitSource, ReadRectMatchesNarrowInThreeDims) {
  Tensor t = testing::Pattern({3, 4, 5}, DType::kF16, 2);
  const std::string path = testing::FreshDir("read_rect") + "/t.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"t", DType::kF16, {3, 4, 5}, t.raw_data()}}, {}).ok());
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok());
  const TensorEntry& e = *r->index().Find("t");
  for (const auto& [off, len] :
       std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{{{0, 0, 0}, {3, 4, 5}},
                                                                          {{1, 0, 0}, {2, 4, 5}},
                                                                          {{0, 1, 0}, {3, 2, 5}},
                                                                          {{2, 3, 1}, {1, 1, 3}},
                                                                          {{0, 0, 4}, {3, 4, 1}},
                                                                          {{1, 1, 1}, {0, 2, 2}}}) {
    auto got = ReadRect(*r, e, off, len);
    ASSERT_TRUE(got.ok()) << got.status();
    Tensor want = t.Narrow(0, off[0], len[0]).Narrow(1, off[1], len[1]).Narrow(2, off[2], len[2]).Clone();
    EXPECT_TRUE(testing::BitwiseEqual(*got, want)) << ShapeToString(off) << " " << ShapeToString(len);
  }
  EXPECT_FALSE(ReadRect(*r, e, {0, 0, 3}, {1, 1, 3}).ok());
}

TEST(InitSource, Gpt2TiedHeadMustEqualWte) {
  v1::ModelSpec m;
  m.set_family("gpt");
  m.set_n_layer(1);
  m.set_n_head(2);
  m.set_d_model(8);
  m.set_seq_len(4);
  m.set_vocab(16);
  m.set_ffn_hidden(32);
  auto layout = HfLayout(m);
  ASSERT_TRUE(layout.ok());
  std::vector<Tensor> keep;
  std::vector<TensorToWrite> w;
  for (const ParamSource& s : *layout) {
    keep.push_back(Random(s.shape, keep.size() + (s.tensor == "lm_head.weight" ? 0 : 1)));
    w.push_back({s.tensor, DType::kF32, s.stored_shape, keep.back().raw_data()});
  }
  const std::string dir = testing::FreshDir("tied");
  ASSERT_TRUE(WriteSafetensors(dir + "/untied.safetensors", w, {}).ok());
  auto bad = InitSource::Open(dir + "/untied.safetensors", m);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(std::string(bad.status().message()), "tensor 'lm_head.weight' differs from 'transformer.wte.weight'");
  w.back().data = keep.front().raw_data();  // tied again
  ASSERT_TRUE(WriteSafetensors(dir + "/tied.safetensors", w, {}).ok());
  auto good = InitSource::Open(dir + "/tied.safetensors", m);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->plan().tied.size(), 1u);
  auto missing = InitSource::Open(dir + "/none.safetensors", m);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(std::string(missing.status().message()), "init_from: " + dir + "/none.safetensors: no such file");
}

}  // namespace
}  // namespace loom::runtime::checkpoint
