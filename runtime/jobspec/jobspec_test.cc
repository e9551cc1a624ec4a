#include "runtime/jobspec/jobspec.h"

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace loom::jobspec {
namespace {

std::string ErrorOf(absl::string_view yaml) {
  auto s = ParseJobSpecYaml(yaml);
  if (s.ok()) {
    ApplyDefaults(*s);
    absl::Status v = ValidateJobSpec(*s);
    return v.ok() ? "" : std::string(v.message());
  }
  return std::string(s.status().message());
}

TEST(JobSpec, ParsesNestedKeysAndDefaults) {
  auto s = ParseJobSpecYaml(R"(
name: tiny
model: {family: llama, n_layer: 2, n_head: 6, n_kv_head: 2, d_model: 96, seq_len: 37, vocab: 256}
train:
  steps: 50
  lr: 3e-4
parallel: {tp: auto, zero_stage: 3}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_TRUE(ValidateJobSpec(*s).ok());
  EXPECT_EQ(s->model().n_kv_head(), 2);
  EXPECT_FLOAT_EQ(s->train().lr(), 3e-4f);
  EXPECT_TRUE(s->parallel().tp_auto());
  EXPECT_EQ(s->train().batch_size(), 8);  // default
  // Round trip through YAML.
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << ToYaml(*s);
  EXPECT_EQ(back->SerializeAsString(), s->SerializeAsString());
}

TEST(JobSpec, ErrorsNameTheKeyAndValue) {
  EXPECT_NE(ErrorOf("model: {n_heads: 4}").find("unknown key 'model.n_heads'"), std::string::npos);
  EXPECT_NE(ErrorOf("model: {n_head: four}").find("model.n_head: expected an integer, got 'four'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("model: {d_model: 100, n_head: 3}").find("model.d_model"), std::string::npos);
  EXPECT_NE(ErrorOf("model: {d_model: 100, n_head: 3}").find("100"), std::string::npos);
  EXPECT_NE(ErrorOf("model: [1, 2").find("malformed YAML at line"), std::string::npos);
  EXPECT_NE(ErrorOf("data: {path: /nonexistent/corpus.txt}").find("data.path"), std::string::npos);
  EXPECT_NE(ErrorOf("init_from: /nonexistent/model.safetensors").find("init_from: no such file (got /nonexistent"),
            std::string::npos);
  EXPECT_NE(ErrorOf("parallel: {tp: 3}").find("parallel.tp"), std::string::npos);
  EXPECT_NE(ErrorOf("train: {precision: fp8}").find("train.precision"), std::string::npos);
  EXPECT_NE(ErrorOf("42").find("expected a mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("empty"), std::string::npos);
}

// data.tokenizer is loaded and checked against the model when the spec is
// validated (runtime/data/tokenizer.h).
TEST(JobSpec, TokenizerIsCheckedAgainstTheModel) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/vocab.json") << "{\"a\": 0}";
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\na a\n";
  EXPECT_EQ(ErrorOf("data: {tokenizer: {kind: bytes}}\n"), "");
  EXPECT_EQ(ErrorOf("data: {tokenizer: {kind: wordpiece}}\n"),
            "data.tokenizer.kind: expected bytes, sentencepiece or gpt2 (got wordpiece)");
  EXPECT_EQ(ErrorOf("data: {format: tokens, tokenizer: {model: /no/such.model}}\n"),
            "data.tokenizer.model: no such file (got /no/such.model)");
  EXPECT_EQ(ErrorOf("model: {vocab: 200}\ndata: {format: tokens, tokenizer: {kind: bytes}}\n"),
            "model.vocab: 200 is smaller than the 256 ids of data.tokenizer (bytes: 256 ids (id = byte value), no "
            "end-of-text id)");
  const std::string gpt2 = "data: {format: tokens, tokenizer: {vocab: " + dir + "/vocab.json, merges: " + dir +
                           "/merges.txt}}\n";
  EXPECT_NE(ErrorOf(gpt2).find("data.tokenizer.vocab: " + dir + "/vocab.json: no token for byte 0x00"),
            std::string::npos)
      << ErrorOf(gpt2);
  auto s = ParseJobSpecYaml("data: {tokenizer: {kind: bytes}}\n");
  ASSERT_TRUE(s.ok());
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data().tokenizer().kind(), "bytes");
}

TEST(JobSpec, LoadNamesTheFile) {
  std::string path = ::testing::TempDir() + "/bad.yaml";
  std::ofstream(path) << "model: {vocab: -1}\n";
  auto s = LoadJobSpec(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find(path), std::string::npos);
  EXPECT_NE(std::string(s.status().message()).find("model.vocab"), std::string::npos);
  EXPECT_EQ(LoadJobSpec("/nonexistent.yaml").status().code(), absl::StatusCode::kNotFound);
}

// The parallel section is checked by the layout rules (parallel/parallel_check.h)
// when a job spec is validated, before any process starts.
TEST(JobSpec, ParallelSectionUsesTheLayoutRules) {
  const std::string model = "model: {family: llama, n_head: 8, n_kv_head: 2, d_model: 64}\n";
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: 4}"), "parallel.tp: must divide model.n_kv_head = 2 (got 4)");
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: 3}"), "parallel.tp: must divide model.n_head = 8 (got 3)");
  EXPECT_EQ(ErrorOf(model + "parallel: {dp: 3}\ntrain: {batch_size: 8}"),
            "train.batch_size: must be divisible by parallel.dp = 3 (got 8)");
  EXPECT_EQ(ErrorOf(model + "parallel: {dp: 2, sequence_parallel: true}"),
            "parallel.sequence_parallel: needs parallel.tp > 1 (got tp=1)");
  EXPECT_EQ(ErrorOf(model + "parallel: {zero_stage: 5}"), "parallel.zero_stage: expected 0, 1, 2 or 3 (got 5)");
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: auto, zero_stage: 5}"),
            "parallel.zero_stage: expected 0, 1, 2 or 3 (got 5)");
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: auto, sequence_parallel: true}"), "");
  EXPECT_EQ(ErrorOf(model + "parallel: {dp: 2, tp: 2, zero_stage: 3}"), "");
}

}  // namespace
}  // namespace loom::jobspec
