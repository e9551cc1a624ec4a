// `loom export --format hf` (hf_export.h) from a run folder and from a
// checkpoint: Hugging Face's names, the stored layouts, and the round trip
// back through init_from; the command's bad input exits 2.
#include "runtime/checkpoint/hf_export.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/ckpt_tool.h"
#include "runtime/checkpoint/export.h"
#include "runtime/checkpoint/hf_layout.h"
#include "runtime/checkpoint/init_from.h"
#include "runtime/checkpoint/test_util.h"
#include "runtime/jobspec/jobspec.h"

namespace loom::runtime::checkpoint {
namespace {

v1::JobSpec Spec(const std::string& family) {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_family(family);
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_n_kv_head(family == "llama" ? 2 : 4);
  m->set_d_model(16);
  m->set_seq_len(8);
  m->set_vocab(24);
  m->set_ffn_hidden(40);
  jobspec::ApplyDefaults(s);
  return s;
}

std::map<std::string, Tensor> RandomParams(const v1::JobSpec& spec) {
  std::map<std::string, Tensor> out;
  auto params = compiler::models::Parameters(spec.model());
  EXPECT_TRUE(params.ok());
  uint64_t seed = 3;
  for (const auto& p : *params) {
    Tensor t = Tensor::MustEmpty(p.shape, DType::kF32);
    Philox rng(seed++, 0);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng.Normal(i));
    out[p.name] = t;
  }
  return out;
}

// The export holds exactly HfLayout's tensors, each StoredFromLoom of the
// parameter, and reads back through init_from to the same parameters.
void ExpectHfFile(const std::string& path, const v1::JobSpec& spec, const std::map<std::string, Tensor>& params) {
  auto layout = HfLayout(spec.model());
  ASSERT_TRUE(layout.ok());
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->index().tensors.size(), layout->size());
  EXPECT_EQ(r->index().metadata.at("format"), "pt");
  for (const ParamSource& s : *layout) {
    auto got = r->ReadTensor(s.tensor);
    ASSERT_TRUE(got.ok()) << s.tensor;
    auto want = StoredFromLoom(s, params.at(s.param));
    ASSERT_TRUE(want.ok());
    EXPECT_TRUE(testing::BitwiseEqual(*got, *want)) << s.tensor;
  }
  auto back = InitSource::Open(path, spec.model());
  ASSERT_TRUE(back.ok()) << back.status();
  auto all = (*back)->ReadAll();
  ASSERT_TRUE(all.ok());
  for (const auto& [name, t] : params) EXPECT_TRUE(testing::BitwiseEqual(all->at(name), t)) << name;
}

TEST(HfExport, FromARunFolder) {
  for (const std::string family : {"gpt", "llama"}) {
    const v1::JobSpec spec = Spec(family);
    const std::map<std::string, Tensor> params = RandomParams(spec);
    const std::string run = testing::FreshDir("run_" + family);
    std::vector<TensorToWrite> w;
    for (const auto& [name, t] : params)
      w.push_back({name, DType::kF32, std::vector<int64_t>(t.shape().begin(), t.shape().end()), t.raw_data()});
    ASSERT_TRUE(WriteSafetensors(run + "/model.safetensors", w, {}).ok());
    std::ofstream(run + "/job.yaml") << jobspec::ToYaml(spec);
    ASSERT_TRUE(ExportHf(run, run + "/hf.safetensors").ok());
    ExpectHfFile(run + "/hf.safetensors", spec, params);
    if (family == "gpt") {  // the tied head is wte's copy
      auto r = SafetensorsReader::Open(run + "/hf.safetensors");
      EXPECT_TRUE(testing::BitwiseEqual(*r->ReadTensor("lm_head.weight"), params.at("wte")));
    }
  }
}

TEST(HfExport, FromACheckpointWithMoments) {
  const v1::JobSpec spec = Spec("llama");
  const std::map<std::string, Tensor> params = RandomParams(spec);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : params) {
    tensors.emplace_back(name, t);
    tensors.emplace_back(name + ".m", Tensor::Zeros(t.shape(), DType::kF32));
  }
  SaveRequest req = RequestFromTensors(tensors, 5);
  req.job_spec = spec.ShortDebugString();
  const std::string root = testing::FreshDir("hf_ckpt");
  ASSERT_TRUE(SaveCheckpoint(root, req).ok());
  ASSERT_TRUE(ExportHf(root, root + "/../hf_ckpt.safetensors", "llama").ok());
  ExpectHfFile(root + "/../hf_ckpt.safetensors", spec, params);
  auto bad = ExportHf(root, root + "/../x.safetensors", "gpt");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--family: gpt, but the model is model.family = llama"), std::string::npos) << bad;
}

TEST(HfExport, CommandRejectsBadInputWithExit2) {
  const std::string dir = testing::FreshDir("hf_cli");
  std::ostringstream out, err;
  EXPECT_EQ(RunCheckpointTool({"export", "--format", "onnx", dir, dir + "/o"}, out, err), 2);
  EXPECT_NE(err.str().find("--format: expected loom or hf, got 'onnx'"), std::string::npos) << err.str();
  EXPECT_EQ(RunCheckpointTool({"export", "--format", "hf", dir + "/none", dir + "/o"}, out, err), 2);
  EXPECT_NE(err.str().find(dir + "/none: not a run folder or a checkpoint"), std::string::npos) << err.str();
  EXPECT_EQ(RunCheckpointTool({"export", "--format", "hf", dir, dir + "/o"}, out, err), 2);  // empty folder
  EXPECT_EQ(RunCheckpointTool({"export", "--family", "gpt", dir, dir + "/o"}, out, err), 2);
  EXPECT_NE(err.str().find("--family applies to --format hf"), std::string::npos) << err.str();
  EXPECT_EQ(RunCheckpointTool({"export", "--bogus", dir, dir + "/o"}, out, err), 2);
  EXPECT_EQ(RunCheckpointTool({"export", "--format", "hf", dir}, out, err), 2);
}

}  // namespace
}  // namespace loom::runtime::checkpoint
