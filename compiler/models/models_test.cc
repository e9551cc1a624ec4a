#include "compiler/models/models.h"

#include "gtest/gtest.h"

namespace loom::models {
namespace {

v1::ModelSpec Spec(const std::string& family) {
  v1::ModelSpec s;
  s.set_family(family);
  s.set_n_layer(2);
  s.set_n_head(3);
  s.set_d_model(96);
  s.set_seq_len(37);
  s.set_vocab(256);
  if (family == "llama") {
    s.set_n_kv_head(1);
    s.set_ffn_hidden(160);
  }
  return s;
}

TEST(Models, GptParameterCountMatchesTheFormula) {
  auto p = Parameters(Spec("gpt"));
  ASSERT_TRUE(p.ok()) << p.status();
  const int64_t C = 96, V = 256, T = 37, L = 2;
  int64_t per_layer = 2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C + C * 4 * C + 4 * C + 4 * C * C + C;
  EXPECT_EQ(NumParameters(*p), V * C + T * C + L * per_layer + 2 * C);
}

TEST(Models, BothFamiliesBuildWithOddSizes) {
  for (const char* fam : {"gpt", "llama"}) {
    auto g = BuildForward(Spec(fam), {.batch = 2, .return_logits = true});
    ASSERT_TRUE(g.ok()) << fam << ": " << g.status();
    ASSERT_EQ(g->outputs().size(), 2u);
    EXPECT_EQ(g->meta(g->outputs()[0].value).shape, Shape{});
    EXPECT_EQ(g->meta(g->outputs()[1].value).shape, (Shape{2 * 37, 256}));
  }
}

TEST(Models, BadSpecsNameTheKey) {
  v1::ModelSpec s = Spec("gpt");
  s.set_n_head(5);
  auto p = Parameters(s);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("model.d_model"), std::string::npos);
  s = Spec("llama");
  s.set_n_kv_head(2);
  EXPECT_NE(std::string(Parameters(s).status().message()).find("model.n_kv_head"), std::string::npos);
  s = Spec("bert");
  EXPECT_NE(std::string(Parameters(s).status().message()).find("model.family"), std::string::npos);
}

TEST(Models, InitIsDeterministic) {
  auto p = Parameters(Spec("llama"));
  ASSERT_TRUE(p.ok());
  auto a = InitParameters(*p, 5), b = InitParameters(*p, 5), c = InitParameters(*p, 6);
  EXPECT_EQ(a.at("output").ToVector(), b.at("output").ToVector());
  EXPECT_NE(a.at("output").ToVector(), c.at("output").ToVector());
  EXPECT_EQ(a.at("norm.weight").GetDouble(0), 1.0);
}

}  // namespace
}  // namespace loom::models
