// Bring your own model: four models written in PyTorch (tests/byom/models.py),
// exported by the user's tool (tools/loom_export.py), imported and trained by
// Loom for 50 steps, against PyTorch's own training of the same code:
//
//   1. tools/loom_export.py tests/byom/models.py:NAME --out model.onnx, as a
//      user runs it (Debian's /usr/bin/python3, torch 1.13);
//   2. tests/byom/make_data.py writes the data files; a job spec names them
//      (data.kind causal, mlm or pairs) and Loom's data path (Dataset::Open,
//      Next, as `loom train` draws) makes the 50 batches;
//   3. the Trainer (job spec -> import -> compile) takes its initial
//      parameters from the file; they and the batches go to
//      tests/byom/torch_train.py, which builds the model from the same
//      factory, loads them by name and trains in f32 and in f64;
//   4. Loom trains on the same batches.
//
// Bounds (dropout 0): every step's loss within 1e-4 relative of torch f32's;
// every parameter's step-0 gradient within 1e-4 (norm-wise relative); after
// the last step, each parameter's gap to torch's f64 run at most 2x torch
// f32's own gap to it, or under 1e-6 (f32 resolution: see
// tests/parity/gpt_parity_test.cc for why a fixed bound cannot hold there).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/data/dataset.h"
#include "runtime/jobspec/jobspec.h"
#include "parallel/trainer.h"
#include "runtime/train/job_model.h"
#include "tests/byom/byom_case.h"
#include "tests/parity/parity_runner.h"
#include "tests/parity/tensor_dir.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::byom {
namespace {

using byom::kPython;
using byom::kSteps;

constexpr double kLossBound = 1e-4, kGradBound = 1e-4;
constexpr double kFinalFactor = 2.0, kFinalFloor = 1e-6;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::StatusOr<v1::JobSpec> WriteJob(const byom::ByomCase& c, const std::string& dir) {
  std::ofstream(dir + "/job.yaml") << byom::JobYaml(c, dir);
  return runtime::jobspec::LoadJobSpec(dir + "/job.yaml");
}

// Loom's data path draws the batches of every step, as `loom train` does.
absl::StatusOr<std::map<std::string, Tensor>> DrawBatches(const v1::JobSpec& spec) {
  LOOM_ASSIGN_OR_RETURN(auto data, runtime::data::Dataset::Open(spec));
  runtime::data::Batch b = data->NewBatch(spec.train().batch_size());
  std::map<std::string, Tensor> out;
  for (int s = 0; s < kSteps; ++s) {
    LOOM_RETURN_IF_ERROR(data->Next(spec.train().batch_size(), 0, &b));
    out[absl::StrCat("x", s)] = b.x().Clone();
    out[absl::StrCat("y", s)] = b.y().Clone();
  }
  return out;
}

// Step 3: torch in f32 (dir/t32) and f64 (dir/t64), side by side.
void RunTorch(const byom::ByomCase& c, const v1::JobSpec& spec, const std::string& dir) {
  const auto& t = spec.train();
  nlohmann::json cfg = {{"steps", kSteps}, {"lr", t.lr()}, {"beta1", t.beta1()}, {"beta2", t.beta2()},
                        {"eps", t.eps()}, {"weight_decay", t.weight_decay()}, {"grad_clip", t.grad_clip()},
                        {"warmup_steps", t.warmup_steps()}, {"ignore_index", spec.model().loss().ignore_index()},
                        {"threads", 1}};
  std::ofstream(dir + "/cfg.json") << cfg.dump();
  auto cmd = [&](const char* dtype) {
    return absl::StrCat(kPython, " tests/byom/torch_train.py --factory tests/byom/models.py:", c.name, " --weights ",
                        dir, "/w --batches ", dir, "/b --config ", dir, "/cfg.json --dtype ", dtype, " --out ", dir,
                        "/t", dtype == std::string("f32") ? "32" : "64");
  };
  testing::CliResult r = testing::Shell(absl::StrCat("(", cmd("f64"), ") & f64=$!; ", cmd("f32"),
                                                     "; f32=$?; wait $f64; f64=$?; exit $((f32 | f64))"));
  ASSERT_EQ(r.code, 0) << r.output;
}

void ReportFinal(const parity::ParityResult& r) {
  std::printf("%-44s %12s %12s %8s\n", "final parameter", "loom-torch64", "torch32-64", "ratio");
  for (const auto& [name, l64] : r.final_rel_f64) {
    const double t64 = r.torch_final_rel_f64.at(name);
    std::printf("%-44s %12.3e %12.3e %8.2f\n", name.c_str(), l64, t64, t64 > 0 ? l64 / t64 : 0.0);
  }
  const parity::NoiseVerdict v = parity::FinalWithinNoise(r, kFinalFactor, kFinalFloor);
  for (const std::string& f : v.failures) ADD_FAILURE() << "final value of " << f;
  std::printf("worst final gap over torch's own f32 gap to f64: %s\n", v.worst.c_str());
}

void RunParity(const byom::ByomCase& c) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = absl::StrCat(::testing::TempDir(), "/byom_", c.name, "_", getpid());
  byom::ExportAndMakeData(c, dir);
  if (::testing::Test::HasFatalFailure()) return;
  auto spec = WriteJob(c, dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto model = runtime::train::BuildModel(*spec);
  ASSERT_TRUE(model.ok()) << model.status();
  parallel::TrainerOptions topts;
  topts.keep_gradients = true;
  auto trainer = parallel::Trainer::Create(*spec, std::move(*model), topts);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  parallel::Trainer& t = **trainer;
  ASSERT_TRUE(parity::SaveTensorDir(dir + "/w", t.Parameters()).ok());
  auto batches = DrawBatches(*spec);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_TRUE(parity::SaveTensorDir(dir + "/b", *batches).ok());
  const double setup_s = Seconds(t0);
  RunTorch(c, *spec, dir);
  if (::testing::Test::HasFatalFailure()) return;
  const double torch_s = Seconds(t0) - setup_s;
  auto t32 = parity::LoadTensorDir(dir + "/t32");
  auto t64 = parity::LoadTensorDir(dir + "/t64");
  ASSERT_TRUE(t32.ok() && t64.ok()) << t32.status() << t64.status();

  parity::ParityResult r;
  double worst_loss = 0;
  for (int s = 0; s < kSteps; ++s) {
    auto loss = t.Step(batches->at(absl::StrCat("x", s)), batches->at(absl::StrCat("y", s)));
    ASSERT_TRUE(loss.ok()) << "step " << s << ": " << loss.status();
    const double ref = t32->at("losses").GetDouble(s), rel = std::abs(*loss - ref) / std::abs(ref);
    worst_loss = std::max(worst_loss, rel);
    EXPECT_LE(rel, kLossBound) << "step " << s << ": loom " << *loss << ", torch " << ref;
    if (s > 0) continue;
    for (const auto& [name, g] : t.LastGradients()) {
      const double err = RelativeError(g, t32->at("grad." + name));
      EXPECT_LE(err, kGradBound) << "step-0 gradient of " << name;
      r.grad_rel[name] = err;
    }
    EXPECT_EQ(r.grad_rel.size(), t.param_info().size());
  }
  for (const auto& [name, p] : t.Parameters()) {
    const Tensor& ref64 = t64->at("final." + name);
    r.final_rel_f64[name] = RelativeError(p, ref64);
    r.torch_final_rel_f64[name] = RelativeError(t32->at("final." + name), ref64);
  }
  ReportFinal(r);
  std::printf("%s: %zu parameters; worst step-0 gradient gap %s; worst loss gap over %d steps %.2e "
              "(loss %.6f -> %.6f); %.1f s (export, data and compile %.1f s, torch %.1f s)\n",
              c.name.c_str(), t.param_info().size(), parity::ParityResult::Worst(r.grad_rel).c_str(), kSteps,
              worst_loss, t32->at("losses").GetDouble(0), t32->at("losses").GetDouble(kSteps - 1), Seconds(t0),
              setup_s, torch_s);
}

TEST(ByomParity, NanoGptWithTiedWeights) { RunParity(byom::Case("gpt")); }
TEST(ByomParity, GptjParallelBlocksWithRotary) { RunParity(byom::Case("gptj")); }
TEST(ByomParity, BertMaskedLmWithPaddingMasks) { RunParity(byom::Case("bert")); }
TEST(ByomParity, MlpClassifierOnNpyPairs) { RunParity(byom::Case("mlp")); }

}  // namespace
}  // namespace loom::tests::byom
