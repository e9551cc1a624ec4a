// The nanoGPT of tests/byom/models.py, exported by tools/loom_export.py and
// imported, on device: cuda (the same lowering as the built-in families:
// parallel::Trainer hands the compiled step to the CUDA executor). Two
// exports: `gpt` (head dim 12: the math attention kernel) and `gpt_d64`
// (head dim 64: the flash kernels under bf16).
//
//   byom_cuda_test [--models=DIR] [--steps=N]
//
// With --models the files are DIR/gpt.onnx and DIR/gpt_d64.onnx; without it
// the test exports them itself (Debian's /usr/bin/python3, torch 1.13). The
// GPU machine has another torch, so bench/cuda/stage.sh exports them here
// (data/byom/) and bench/cuda/run_checks.sh passes the folder.
//
//   - PlansOnCuda (any machine): the job check before launch (CheckOnnxJob,
//     device: cuda) accepts each model, and the CUDA plan of its training
//     step covers every node of the compiled graph.
//   - TrainsOnCudaAsOnTheCpu (needs a GPU; skips "needs a GPU: ..." without
//     one): the same file, the same batches, `--steps` AdamW steps on the CPU
//     (f32) and on the GPU, per-step losses compared. The bounds are
//     bench/cuda/gpt_cuda_parity's for the built-in families on the GPU: f32
//     (true-f32 GEMMs) 1e-4 relative at every step; bf16 (bf16 GEMMs,
//     attention and activations, f32 norms, softmax statistics and loss, f32
//     master weights) 1e-2 relative at every step, the spread that bf16's
//     8-bit mantissa (relative rounding 2^-9 per stored activation) leaves in a
//     loss after a few layers.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_device.h"
#include "parallel/trainer.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/train/job_model.h"
#include "runtime/train/onnx_model.h"

namespace loom::tests::byom {
namespace {

// models.py: VOCAB, SEQ, BATCH.
constexpr int kVocab = 67, kSeq = 12, kBatch = 4;

constexpr const char* kModels[] = {"gpt", "gpt_d64"};  // factories of models.py

std::string g_models;  // --models
int g_steps = 20;      // --steps

// The model file: --models/NAME.onnx, else exported now (empty with *skip set
// when /usr/bin/python3 has no torch).
std::string ModelFile(const std::string& name, std::string* skip) {
  if (!g_models.empty()) return absl::StrCat(g_models, "/", name, ".onnx");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/byom_cuda");
  const std::string cmd = absl::StrCat("mkdir -p ", dir, " && OMP_NUM_THREADS=1 timeout 300 /usr/bin/python3 ",
                                       "tools/loom_export.py tests/byom/models.py:", name, " --out ", dir, "/", name,
                                       ".onnx > ", dir, "/", name, ".log 2>&1");
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) {
    *skip = "/usr/bin/python3 cannot import torch";
    return "";
  }
  EXPECT_EQ(rc, 0) << "'" << cmd << "' failed; see " << dir << "/" << name << ".log";
  return rc == 0 ? absl::StrCat(dir, "/", name, ".onnx") : "";
}

v1::JobSpec Spec(const std::string& onnx, const std::string& device, const std::string& precision) {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_onnx(onnx);
  m->set_seq_len(kSeq);
  m->set_vocab(kVocab);
  s.mutable_data()->set_format("tokens");  // vocab 67: not the byte tokenizer
  auto* t = s.mutable_train();
  t->set_batch_size(kBatch);
  t->set_lr(2e-3f);
  t->set_warmup_steps(5);
  t->set_weight_decay(0.1f);
  t->set_grad_clip(1.0f);
  s.set_device(device);
  t->set_precision(precision);
  runtime::jobspec::ApplyDefaults(s);
  const absl::Status valid = runtime::jobspec::ValidateJobSpec(s);
  EXPECT_TRUE(valid.ok()) << valid;
  return s;
}

// Token windows: x and y = x shifted by one, [batch, seq] i32, from a fixed seed.
std::vector<std::pair<Tensor, Tensor>> Batches(int steps) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int32_t> tok(0, kVocab - 1);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int s = 0; s < steps; ++s) {
    Tensor x = Tensor::MustEmpty({kBatch, kSeq}, DType::kI32), y = Tensor::MustEmpty({kBatch, kSeq}, DType::kI32);
    for (int b = 0; b < kBatch; ++b) {
      std::vector<int32_t> w(kSeq + 1);
      for (int32_t& v : w) v = tok(gen);
      for (int t = 0; t < kSeq; ++t) {
        x.data<int32_t>()[b * kSeq + t] = w[t];
        y.data<int32_t>()[b * kSeq + t] = w[t + 1];
      }
    }
    out.emplace_back(std::move(x), std::move(y));
  }
  return out;
}

std::vector<double> Train(const v1::JobSpec& spec, const std::vector<std::pair<Tensor, Tensor>>& batches) {
  auto model = runtime::train::BuildModel(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto trainer = parallel::Trainer::Create(spec, std::move(*model));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  std::vector<double> losses;
  for (const auto& [x, y] : batches) {
    auto loss = (*trainer)->Step(x, y);
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return {};
    losses.push_back(*loss);
  }
  return losses;
}

void PlanCovers(const std::string& name, const std::string& onnx) {
  for (const char* precision : {"f32", "bf16"}) {
    const v1::JobSpec spec = Spec(onnx, "cuda", precision);
    const absl::Status check = runtime::train::CheckOnnxJob(spec);
    EXPECT_TRUE(check.ok()) << name << " " << precision << ": " << check;
    auto model = runtime::train::BuildModel(spec);
    ASSERT_TRUE(model.ok()) << model.status();
    auto step = parallel::PlanCudaStep(spec, *model);
    ASSERT_TRUE(step.ok()) << name << " " << precision << ": " << step.status();
    const compiler::cuda::CudaPlan& plan = step->plan;
    // Every node of the compiled step (the graph the plan was built from)
    // runs in some launch, or is a view the plan resolves without one (a
    // reshape aliasing its input's bytes; under bf16 with 64-dim heads, the
    // slice -> reshape -> permute windows of the qkv output that flash
    // attention reads as strides: outputs not stored on their own).
    const compiler::ir::Graph& fused = step->step;
    std::set<int> covered;
    for (const auto& l : plan.launches) covered.insert(l.nodes.begin(), l.nodes.end());
    int views = 0;
    for (size_t i = 0; i < fused.nodes().size(); ++i) {
      if (covered.count(static_cast<int>(i))) continue;
      const compiler::ir::Node& n = fused.nodes()[i];
      bool view = n.op == "reshape" || n.op == "permute" || n.op == "slice";
      for (int v : n.outputs) view = view && plan.root[v] != v;
      views += view;
      EXPECT_TRUE(view) << name << " " << precision << ": node " << i << " (" << n.op << ") has no launch";
    }
    std::printf("%s %s: %zu launches cover the %zu nodes of the training step (%d of them views)\n", name.c_str(),
                precision, plan.launches.size(), fused.nodes().size(), views);
  }
}

TEST(ByomCuda, PlansOnCuda) {
  for (const char* name : kModels) {
    std::string skip;
    const std::string onnx = ModelFile(name, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_FALSE(onnx.empty());
    PlanCovers(name, onnx);
  }
}

void TrainAndCompare(const std::string& name, const std::string& onnx) {
  const auto batches = Batches(g_steps);
  const std::vector<double> cpu = Train(Spec(onnx, "cpu", "f32"), batches);
  ASSERT_EQ(cpu.size(), batches.size()) << name;
  for (const auto& [precision, bound] : {std::pair<const char*, double>{"f32", 1e-4}, {"bf16", 1e-2}}) {
    const std::vector<double> gpu = Train(Spec(onnx, "cuda", precision), batches);
    ASSERT_EQ(gpu.size(), cpu.size()) << name << " " << precision;
    double worst = 0;
    for (size_t s = 0; s < cpu.size(); ++s) {
      const double rel = std::abs(gpu[s] - cpu[s]) / std::abs(cpu[s]);
      worst = std::max(worst, rel);
      EXPECT_LT(rel, bound) << name << " " << precision << " step " << s << ": cuda " << gpu[s] << ", cpu " << cpu[s];
    }
    std::printf("%s %s: loss step 0 %.6f (cpu %.6f), step %zu %.6f (cpu %.6f); worst relative gap %.3e (bound %.0e)\n",
                name.c_str(), precision, gpu[0], cpu[0], cpu.size() - 1, gpu.back(), cpu.back(), worst, bound);
  }
}

TEST(ByomCuda, TrainsOnCudaAsOnTheCpu) {
  const absl::Status avail = kernels::cuda::CudaAvailable();
  if (!avail.ok()) GTEST_SKIP() << "needs a GPU: " << avail.message();
  for (const char* name : kModels) {
    std::string skip;
    const std::string onnx = ModelFile(name, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_FALSE(onnx.empty());
    TrainAndCompare(name, onnx);
  }
}

}  // namespace
}  // namespace loom::tests::byom

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--models=", 9) == 0) {
      loom::tests::byom::g_models = argv[i] + 9;
    } else if (std::strncmp(argv[i], "--steps=", 8) == 0 && std::atoi(argv[i] + 8) > 0) {
      loom::tests::byom::g_steps = std::atoi(argv[i] + 8);
    } else {
      std::fprintf(stderr, "usage: byom_cuda_test [gtest flags] [--models=DIR] [--steps=N>0]\n");
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
