// The training benchmark's presets, flags and FLOP count (train_config.h), and
// its PyTorch side (train_torch.py, run with Debian's torch on the CPU):
// the same presets, and models with Loom's parameter names and shapes.
#include "bench/cuda/train_config.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom::bench::cuda {
namespace {

absl::StatusOr<TrainFlags> Parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"train_bench"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseTrainFlags(static_cast<int>(argv.size()), argv.data());
}

// The parameter counts documented in train_config.h and docs/perf.md.
TEST(TrainConfig, PresetParameterCountsMatchTheDocumentedOnes) {
  const std::map<std::string, int64_t> documented = {{"gpt2-124m", 124475904},
                                                     {"gpt2-350m", 354871296},
                                                     {"llama-124m", 124668672},
                                                     {"llama-350m", 336118784},
                                                     {"llama-1b", 1100048384}};
  ASSERT_EQ(TrainPresets().size(), documented.size());
  for (const TrainPreset& p : TrainPresets()) {
    absl::StatusOr<TrainFlags> f = Parse({"--data=/d", "--preset=" + p.name});
    ASSERT_TRUE(f.ok()) << p.name << ": " << f.status();
    auto params = compiler::models::Parameters(f->spec);
    ASSERT_TRUE(params.ok()) << p.name;
    ASSERT_TRUE(documented.count(p.name)) << p.name;
    EXPECT_EQ(compiler::models::NumParameters(*params), documented.at(p.name)) << p.name;
    EXPECT_EQ(f->batch * f->spec.seq_len(), 16384) << p.name;
  }
}

TEST(TrainConfig, FlagsOverrideThePresetWhereverItStands) {
  absl::StatusOr<TrainFlags> f =
      Parse({"--n_layer=2", "--data=/d", "--preset=llama-1b", "--batch=3", "--steps=7", "--ffn=64"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->spec.family(), "llama");
  EXPECT_EQ(f->spec.n_layer(), 2);
  EXPECT_EQ(f->spec.n_head(), 32);
  EXPECT_EQ(f->spec.n_kv_head(), 4);
  EXPECT_EQ(f->spec.ffn_hidden(), 64);
  EXPECT_EQ(f->batch, 3);
  EXPECT_EQ(f->steps, 7);
  EXPECT_EQ(f->preset, "llama-1b");
}

TEST(TrainConfig, BadFlagsAreInvalidArgumentNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--preset=gpt2-7b"}, "--preset"},
      {{"--n_layer=0"}, "--n_layer"},
      {{"--n_head=x"}, "--n_head"},
      {{"--steps=0"}, "--steps"},
      {{"--batch=-1"}, "--batch"},
      {{"--family=bert"}, "--family"},
      {{"--loss-tol=-1"}, "--loss-tol"},
      {{"--d_model=100"}, "--d_model"},                           // 100 % 12 heads
      {{"--preset=llama-124m", "--n_kv_head=5"}, "--n_kv_head"},  // 5 does not divide 12
      {{"--n_kv_head=4"}, "--n_kv_head"},                         // gpt has no GQA
      {{"--bogus=1"}, "--bogus"},
      {{"--attention=slow"}, "--attention"},
  };
  for (const auto& [args, flag] : cases) {
    std::vector<std::string> with_data = args;
    with_data.push_back("--data=/d");
    absl::StatusOr<TrainFlags> f = Parse(with_data);
    ASSERT_FALSE(f.ok()) << args[0];
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << args[0];
    EXPECT_NE(std::string(f.status().message()).find(flag), std::string::npos) << args[0] << ": " << f.status();
  }
  absl::StatusOr<TrainFlags> no_data = Parse({});
  ASSERT_FALSE(no_data.ok());
  EXPECT_NE(std::string(no_data.status().message()).find("--data"), std::string::npos);
}

// 6 x (GEMM parameters) + 12 L C T, by hand for two small shapes.
TEST(TrainConfig, FlopsPerTokenCountsGemmParametersAndAttention) {
  absl::StatusOr<TrainFlags> g = Parse({"--data=/d", "--n_layer=2", "--n_head=2", "--d_model=8", "--seq_len=4",
                                        "--vocab=10", "--ffn=16"});
  ASSERT_TRUE(g.ok()) << g.status();
  auto gp = compiler::models::Parameters(g->spec);
  ASSERT_TRUE(gp.ok());
  // wte 10x8 (the head too); per layer c_attn 8x24, c_proj 8x8, c_fc 8x16, mlp c_proj 16x8; wpe left out.
  const double g_mm = 80 + 2 * (192 + 64 + 128 + 128);
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(g->spec, *gp), 6 * g_mm + 12.0 * 2 * 8 * 4);
  absl::StatusOr<TrainFlags> l = Parse({"--data=/d", "--family=llama", "--n_layer=2", "--n_head=4",
                                        "--n_kv_head=2", "--d_model=8", "--seq_len=4", "--vocab=10", "--ffn=12"});
  ASSERT_TRUE(l.ok()) << l.status();
  auto lp = compiler::models::Parameters(l->spec);
  ASSERT_TRUE(lp.ok());
  // output 8x10 (tok_embeddings left out); per layer wq 8x8, wk and wv 8x4 (2 kv heads of 2), wo 8x8,
  // w1 and w3 8x12, w2 12x8.
  const double l_mm = 80 + 2 * (64 + 32 + 32 + 64 + 96 + 96 + 96);
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(l->spec, *lp), 6 * l_mm + 12.0 * 2 * 8 * 4);
}

}  // namespace
}  // namespace loom::bench::cuda
