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

TEST(JobSpec, LoadNamesTheFile) {
  std::string path = ::testing::TempDir() + "/bad.yaml";
  std::ofstream(path) << "model: {vocab: -1}\n";
  auto s = LoadJobSpec(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find(path), std::string::npos);
  EXPECT_NE(std::string(s.status().message()).find("model.vocab"), std::string::npos);
  EXPECT_EQ(LoadJobSpec("/nonexistent.yaml").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom::jobspec
