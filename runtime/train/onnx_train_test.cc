// Training causal language models exported by torch 1.13's ONNX exporter
// (compiler/import/onnx/testdata/causal_lm.py, run under /usr/bin/python3)
// against PyTorch's own training of the same model on the same batches:
//   - step 0's loss (the forward at the file's initial weights) within 1e-5
//     relative of torch's, as the issue asks, and the next four steps (AdamW
//     after Loom's backward through the imported graph) within the same bound:
//     gradients and updates agree, so the trajectories stay together
//     (measured: at most 1.2e-7 on every step of both models);
//   - the parameter/buffer split: the gpt model by the reachability rule (its
//     causal-mask buffers stay buffers), the rotary model by the exporter's
//     metadata (its inverse-frequency buffers would otherwise train);
//   - opsets 17 and 14 (where LayerNormalization arrives decomposed).
// Skips, with the reason, when /usr/bin/python3 cannot import torch.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/import/onnx/importer.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/jobspec/jobspec.h"
#include "parallel/trainer.h"
#include "runtime/train/job_model.h"

namespace loom::train {
namespace {

constexpr char kScript[] = "compiler/import/onnx/testdata/causal_lm.py";
constexpr int kSteps = 5;
constexpr int64_t kB = 2, kT = 8, kV = 64;
constexpr double kBound = 1e-5;  // relative difference of each step's loss

struct Exported {
  std::string dir, skip, failure;
  std::vector<double> losses;
  std::vector<std::string> params;
};

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

Exported Export(const std::string& arch, int opset = 17) {
  Exported e;
  const char* tmp = std::getenv("TEST_TMPDIR");
  e.dir = absl::StrCat(tmp ? tmp : "/tmp", "/onnx_", arch, "_", opset);
  const std::string cmd = absl::StrCat("mkdir -p ", e.dir, " && OMP_NUM_THREADS=1 timeout 240 /usr/bin/python3 ", kScript,
                                       " --out ", e.dir, " --arch ", arch, " --opset ", opset, " --steps ", kSteps,
                                       " > ", e.dir, "/export.log 2>&1");
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) {
    e.skip = "/usr/bin/python3 cannot import torch";
    return e;
  }
  if (rc != 0) {
    e.failure = absl::StrCat("'", cmd, "' exited with ", rc);
    return e;
  }
  for (const std::string& l : Lines(e.dir + "/losses.txt")) e.losses.push_back(std::stod(l));
  e.params = Lines(e.dir + "/params.txt");
  return e;
}

Tensor ReadI32(const std::string& path) {
  Tensor t = Tensor::MustEmpty({kB, kT}, DType::kI32);
  std::ifstream in(path, std::ios::binary);
  in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  EXPECT_TRUE(in.good()) << path;
  return t;
}

v1::JobSpec Spec(const std::string& onnx_path) {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_onnx(onnx_path);
  m->set_seq_len(kT);
  m->set_vocab(kV);
  s.mutable_data()->set_format("tokens");  // vocab 64: not the byte tokenizer
  auto* t = s.mutable_train();
  t->set_batch_size(kB);
  t->set_lr(1e-3f);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_weight_decay(0.1f);
  jobspec::ApplyDefaults(s);
  EXPECT_TRUE(jobspec::ValidateJobSpec(s).ok()) << jobspec::ValidateJobSpec(s);
  return s;
}

// Trains kSteps on the exported batches and compares with torch's losses.
void TrainAndCompare(const Exported& e, const std::string& model_path) {
  const v1::JobSpec spec = Spec(model_path);
  auto model = BuildModel(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  auto trainer = parallel::Trainer::Create(spec, std::move(*model));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::set<std::string> loom_params;
  for (const auto& p : (*trainer)->param_info()) loom_params.insert(p.name);
  EXPECT_EQ(loom_params, std::set<std::string>(e.params.begin(), e.params.end()));
  for (int i = 0; i < kSteps; ++i) {
    auto loss = (*trainer)->Step(ReadI32(absl::StrCat(e.dir, "/x", i, ".i32")), ReadI32(absl::StrCat(e.dir, "/y", i, ".i32")));
    ASSERT_TRUE(loss.ok()) << loss.status();
    const double rel = std::abs(*loss - e.losses[i]) / std::abs(e.losses[i]);
    std::printf("step %d: loom %.7f torch %.7f (relative %.2e)\n", i, *loss, e.losses[i], rel);
    EXPECT_LE(rel, kBound) << "step " << i;
  }
}

TEST(OnnxTraining, GptMatchesTorch) {
  Exported e = Export("gpt");
  if (!e.skip.empty()) GTEST_SKIP() << e.skip;
  ASSERT_TRUE(e.failure.empty()) << e.failure;
  auto m = compiler::import::onnx::ImportModel(e.dir + "/model.onnx", {.default_input_shape = Shape{kB, kT}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->report.param_rule, compiler::import::onnx::ParamRule::kReachability);
  EXPECT_EQ(std::set<std::string>(m->params.begin(), m->params.end()),
            std::set<std::string>(e.params.begin(), e.params.end()));
  for (const char* buffer : {"h.0.bias", "h.1.bias"})
    EXPECT_TRUE(std::find(m->params.begin(), m->params.end(), buffer) == m->params.end()) << buffer;
  TrainAndCompare(e, e.dir + "/model.onnx");
}

// The rotary model with the exporter's metadata written into a copy.
void TrainWithMetadata(const Exported& e) {
  ::onnx::ModelProto model;
  {
    std::ifstream in(e.dir + "/model.onnx", std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&in));
  }
  auto* kv = model.add_metadata_props();
  kv->set_key("loom.parameters");
  kv->set_value(absl::StrJoin(e.params, ","));
  const std::string with_meta = e.dir + "/model_meta.onnx";
  {
    std::ofstream out(with_meta, std::ios::binary);
    ASSERT_TRUE(model.SerializeToOstream(&out));
  }
  TrainAndCompare(e, with_meta);
}

TEST(OnnxTraining, RotaryMatchesTorchWithTheExportersMetadata) {
  Exported e = Export("rotary");
  if (!e.skip.empty()) GTEST_SKIP() << e.skip;
  ASSERT_TRUE(e.failure.empty()) << e.failure;
  // Without metadata the inverse-frequency buffers reach the loss through
  // arithmetic, so the reachability rule makes them parameters.
  auto plain = compiler::import::onnx::ImportModel(e.dir + "/model.onnx", {.default_input_shape = Shape{kB, kT}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(std::find(plain->params.begin(), plain->params.end(), "h.0.inv_freq") != plain->params.end());
  TrainWithMetadata(e);
}

// Opset 14: LayerNormalization arrives decomposed (ReduceMean, Sub, Pow, Sqrt, Div).
TEST(OnnxTraining, RotaryAtOpset14MatchesTorch) {
  Exported e = Export("rotary", 14);
  if (!e.skip.empty()) GTEST_SKIP() << e.skip;
  ASSERT_TRUE(e.failure.empty()) << e.failure;
  TrainWithMetadata(e);
}

}  // namespace
}  // namespace loom::train
