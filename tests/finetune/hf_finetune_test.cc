// Fine-tuning from Hugging Face checkpoints, end to end, with the real `loom`
// binary and torch (tests/finetune/hf_torch.py: GPT-2 and Llama written with
// Hugging Face's module and parameter names).
//
// For each family: torch writes a checkpoint in Hugging Face's on-disk layout
// with random weights, and config.json beside it; `loom train` starts from it
// (init_from; the config is checked against the spec) and its first-step loss
// equals torch's forward on the same weights and batch within 1e-5. It trains
// (8 steps); `loom export --format hf` writes the result, which torch loads
// with load_state_dict(strict=True) (read by tools/safetensors_py.py), and
// torch's loss of those weights equals the first-step loss of a Loom run
// started from the export (`--init`), below the first run's. A parallel run
// (`loom run`, tp = 2: every rank reads only its block of each parameter)
// starts from the same loss. Bad files exit 2 naming init_from and the tensor
// (or the spec field that differs from the config.json beside the file).
// Full size: the names and shapes of Hugging Face's gpt2 checkpoint (124M
// parameters, built by torch on the meta device) map onto the model of
// examples/finetune-gpt2.yaml.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/checkpoint/hf_layout.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/data/dataset.h"
#include "runtime/jobspec/jobspec.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::finetune {
namespace {

using testing::CliResult;
using testing::RunLoom;
using testing::Shell;

struct Family {
  std::string name;
  std::string model_yaml;  // the job's model section
  std::string config;      // the same for hf_torch.py
  int64_t vocab;
};

const Family kGpt{"gpt", "{family: gpt, n_layer: 2, n_head: 4, d_model: 32, seq_len: 16, vocab: 96, ffn_hidden: 64}",
                  R"({"family": "gpt", "n_layer": 2, "n_head": 4, "d_model": 32, "seq_len": 16, "vocab": 96,
                      "ffn_hidden": 64})",
                  96};
const Family kLlama{"llama",
                    "{family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, seq_len: 16, vocab: 80, "
                    "ffn_hidden: 48, rope_theta: 1000, norm_eps: 1e-6}",
                    R"({"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "seq_len": 16,
                        "vocab": 80, "ffn_hidden": 48, "rope_theta": 1000, "norm_eps": 1e-6})",
                    80};

std::string Dir(const std::string& name) {
  std::string d = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

CliResult Torch(const std::string& args) {
  return Shell("timeout 120 /usr/bin/python3 tests/finetune/hf_torch.py " + args);
}

double ParseTorchLoss(const CliResult& r) {
  size_t at = r.output.rfind("loss ");
  return at == std::string::npos ? NAN : std::stod(r.output.substr(at + 5));
}

double StepLoss(const std::string& run_dir, int step) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j["step"] == step) return j["loss"];
  }
  return NAN;
}

// Learnable token ids: mostly a fixed successor of the previous token.
void WriteTokens(const std::string& path, int64_t n, int64_t vocab) {
  Philox rng(11, 0);
  std::vector<uint16_t> t(n);
  t[0] = 1;
  for (int64_t i = 1; i < n; ++i)
    t[i] = static_cast<uint16_t>(rng.Uniform(2 * i) < 0.9 ? (t[i - 1] * 7 + 3) % vocab
                                                          : static_cast<int64_t>(rng.Uniform(2 * i + 1) * vocab));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), n * 2);
}

std::string Job(const Family& f, const std::string& dir, const std::string& run, int steps) {
  return absl::StrCat("name: ft-", f.name, "\nmodel: ", f.model_yaml, "\ndata: {path: ", dir,
                      "/tokens.u16, format: tokens, tokens_dtype: u16}\n", "train: {steps: ", steps,
                      ", batch_size: 4, lr: 1e-2, log_every: 1, eval_every: ", steps,
                      ", eval_batches: 1, sample_tokens: 4, seed: 3}\nrun_dir: ", dir, "/", run, "\n");
}

// The first batch `loom train` draws for this job (same data API and seeds),
// written as x, y for torch.
void WriteFirstBatch(const std::string& job_path, const std::string& out) {
  std::ifstream in(job_path);
  std::stringstream text;
  text << in.rdbuf();
  auto spec = runtime::jobspec::ParseJobSpecYaml(text.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  runtime::jobspec::ApplyDefaults(*spec);
  auto dataset = runtime::data::Dataset::Open(*spec);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const int64_t B = spec->train().batch_size(), T = spec->model().seq_len();
  runtime::data::Batch batch = (*dataset)->NewBatch(B);
  ASSERT_TRUE((*dataset)->Next(B, 0, &batch).ok());
  const Tensor& x = *batch.Find("x");
  const Tensor& y = *batch.Find("y");
  auto w = runtime::checkpoint::WriteSafetensors(
      out, {{"x", DType::kI32, {B, T}, x.raw_data()}, {"y", DType::kI32, {B, T}, y.raw_data()}}, {});
  ASSERT_TRUE(w.ok()) << w.status();
}

class FineTune : public ::testing::TestWithParam<Family> {};

TEST_P(FineTune, LoadsTrainsAndExportsInHuggingFaceLayout) {
  const Family& f = GetParam();
  const std::string dir = Dir("ft_" + f.name), cfg = dir + "/loom_model.json";
  WriteText(cfg, f.config);
  WriteTokens(dir + "/tokens.u16", 3 * runtime::data::kSplitBlock, f.vocab);
  const std::string job = dir + "/job.yaml";
  WriteText(job, Job(f, dir, "run1", 8) + "init_from: " + dir + "/hf.safetensors\n");
  WriteFirstBatch(job, dir + "/batch.safetensors");
  // The checkpoint, and torch's loss of the first batch on it (read back from the file).
  CliResult ref = Torch(absl::StrCat("make --config ", cfg, " --seed 5 --out ", dir, "/hf.safetensors --batch ", dir,
                                     "/batch.safetensors"));
  ASSERT_EQ(ref.code, 0) << ref.output;

  // First step: Loom's loss on the Hugging Face weights equals torch's.
  CliResult run1 = RunLoom("train " + job, 300);
  ASSERT_EQ(run1.code, 0) << run1.output;
  EXPECT_NE(run1.output.find("Hugging Face"), std::string::npos) << run1.output;
  const double loom1 = StepLoss(dir + "/run1", 1), torch1 = ParseTorchLoss(ref);
  std::printf("%s: first-step loss loom %.7f torch %.7f\n", f.name.c_str(), loom1, torch1);
  EXPECT_NEAR(loom1, torch1, 1e-5);

  // Export, strict load into the Hugging Face model, and back into Loom.
  CliResult ex = RunLoom(absl::StrCat("export --format hf ", dir, "/run1 ", dir, "/out.safetensors"));
  ASSERT_EQ(ex.code, 0) << ex.output;
  CliResult strict = Torch(absl::StrCat("loss --strict --config ", cfg, " --weights ", dir, "/out.safetensors --batch ",
                                        dir, "/batch.safetensors"));
  ASSERT_EQ(strict.code, 0) << strict.output;
  WriteText(dir + "/job2.yaml", Job(f, dir, "run2", 1));
  CliResult run2 = RunLoom(absl::StrCat("train ", dir, "/job2.yaml --init ", dir, "/out.safetensors"), 300);
  ASSERT_EQ(run2.code, 0) << run2.output;
  const double loom2 = StepLoss(dir + "/run2", 1), torch2 = ParseTorchLoss(strict);
  std::printf("%s: after 8 steps, exported: loom %.7f torch %.7f\n", f.name.c_str(), loom2, torch2);
  EXPECT_NEAR(loom2, torch2, 1e-5);
  EXPECT_LT(loom2, loom1 - 0.1) << "training did not lower the loss of the first batch";

  // Two ranks (tp = 2), each reading its block of every parameter.
  CliResult par = RunLoom(absl::StrCat("run ", job, " --tp 2 --steps 1 --run-dir ", dir, "/run_tp2"), 300);
  ASSERT_EQ(par.code, 0) << par.output;
  EXPECT_NEAR(StepLoss(dir + "/run_tp2", 1), torch1, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, FineTune, ::testing::Values(kGpt, kLlama),
                         [](const auto& info) { return info.param.name; });

TEST(FineTuneErrors, BadFilesExit2NamingInitFromAndTheTensor) {
  const std::string dir = Dir("ft_errors");
  for (const char* d : {"/gpt", "/llama", "/heads"}) std::filesystem::create_directories(dir + d);
  WriteText(dir + "/gpt.json", kGpt.config);
  WriteText(dir + "/llama.json", kLlama.config);
  WriteTokens(dir + "/tokens.u16", 3 * runtime::data::kSplitBlock, 96);
  ASSERT_EQ(Torch(absl::StrCat("make --config ", dir, "/gpt.json --out ", dir, "/gpt/model.safetensors")).code, 0);
  ASSERT_EQ(Torch(absl::StrCat("make --config ", dir, "/llama.json --out ", dir, "/llama/model.safetensors")).code, 0);
  // The gpt file without one tensor; the gpt file with a config.json of another head count.
  auto r = runtime::checkpoint::SafetensorsReader::Open(dir + "/gpt/model.safetensors");
  ASSERT_TRUE(r.ok());
  std::vector<Tensor> keep;
  std::vector<runtime::checkpoint::TensorToWrite> w;
  for (const auto& e : r->index().tensors) {
    if (e.name == "h.1.mlp.c_proj.bias") continue;
    keep.push_back(*r->ReadTensor(e.name));
    w.push_back({e.name, e.dtype, e.shape, keep.back().raw_data()});
  }
  ASSERT_TRUE(runtime::checkpoint::WriteSafetensors(dir + "/gpt/missing.safetensors", w, {}).ok());
  std::filesystem::copy_file(dir + "/gpt/model.safetensors", dir + "/heads/model.safetensors");
  std::ifstream cin(dir + "/gpt/config.json");
  nlohmann::json hc = nlohmann::json::parse(cin);
  hc["n_head"] = 2;
  WriteText(dir + "/heads/config.json", hc.dump());
  const std::string job = dir + "/job.yaml";
  WriteText(job, Job(kGpt, dir, "run", 1));
  struct Case {
    std::string file, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"/gpt/missing.safetensors", "no tensor 'transformer.h.1.mlp.c_proj.bias' or 'h.1.mlp.c_proj.bias'"},
           {"/llama/model.safetensors", "Hugging Face Llama layout; the job has model.family = gpt"},
           {"/heads/model.safetensors", "model.n_head: config.json beside the file has n_head = 2"},
           {"/none.safetensors", "no such file"}}) {
    CliResult res = RunLoom(absl::StrCat("train ", job, " --init ", dir, c.file), 120);
    EXPECT_EQ(res.code, 2) << c.file << "\n" << res.output;
    EXPECT_NE(res.output.find("init_from: " + dir + c.file), std::string::npos) << res.output;
    EXPECT_NE(res.output.find(c.needle), std::string::npos) << c.needle << " not in:\n" << res.output;
  }
  // A worker of `loom run` reports the same, and the job is a configuration error.
  WriteText(dir + "/job_tp.yaml", Job(kGpt, dir, "run_tp", 1) + "init_from: " + dir + "/gpt/missing.safetensors\n");
  CliResult res = RunLoom("run " + dir + "/job_tp.yaml --tp 2", 120);
  EXPECT_EQ(res.code, 2) << res.output;
  EXPECT_NE(res.output.find("h.1.mlp.c_proj.bias"), std::string::npos) << res.output;
  // In the spec, a missing file is refused before anything runs.
  WriteText(dir + "/job_none.yaml", Job(kGpt, dir, "run_none", 1) + "init_from: " + dir + "/none.safetensors\n");
  res = RunLoom("train " + dir + "/job_none.yaml", 60);
  EXPECT_EQ(res.code, 2) << res.output;
  EXPECT_NE(res.output.find("init_from: no such file"), std::string::npos) << res.output;
}

// Hugging Face's gpt2 checkpoint (names and shapes as torch builds them, no
// data) maps onto the model of the fine-tuning example.
TEST(FineTuneExample, Gpt2CheckpointNamesAndShapesMapOntoTheExample) {
  std::ifstream in("examples/finetune-gpt2.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = runtime::jobspec::ParseJobSpecYaml(ss.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  runtime::jobspec::ApplyDefaults(*spec);
  EXPECT_FALSE(spec->init_from().empty());
  CliResult names = Torch(
      R"(names --config '{"family": "gpt", "n_layer": 12, "n_head": 12, "d_model": 768, "seq_len": 1024, "vocab": 50257}')");
  ASSERT_EQ(names.code, 0) << names.output;
  nlohmann::json header = nlohmann::json::object();
  uint64_t pos = 0;
  for (const auto& e : nlohmann::json::parse(names.output)) {
    uint64_t n = 4;
    for (int64_t d : e[1]) n *= d;
    header[e[0].get<std::string>()] = {{"dtype", "F32"}, {"shape", e[1]}, {"data_offsets", {pos, pos + n}}};
    pos += n;
  }
  auto index = runtime::checkpoint::ParseSafetensorsHeader(header.dump(), pos, "gpt2");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->tensors.size(), 160u);  // 148 parameters and 12 attn.bias buffers
  auto plan = runtime::checkpoint::PlanInit(*index, spec->model(), "init_from: gpt2");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->layout, runtime::checkpoint::WeightLayout::kHfGpt2);
  EXPECT_EQ(plan->params.size(), 148u);
  EXPECT_EQ(plan->ignored.size(), 12u);
  int64_t stored = 0;
  for (const auto& s : plan->params) stored += NumElements(s.stored_shape);
  EXPECT_EQ(stored, 124439808);  // GPT-2 small
}

}  // namespace
}  // namespace loom::tests::finetune
