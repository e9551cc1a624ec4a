// PyTorch parity of the compiled training step, on identical weights and
// batches: loss, logits and every parameter's gradient at step 0, then the loss
// curve of 50 AdamW steps (with warmup, weight decay and clipping).
// The reference is tests/parity/gpt_torch.py run by Debian's python3-torch.
//
// Precision against PyTorch's own, with torch also training in f64 from the
// same weights and batches as the reference, and training again in f32 in
// four ways that are the same training mathematically with the rounding
// redrawn (StandardTorchNoiseRuns: the batch rows reversed, and the loss scaled by S
// with AdamW's eps and the clip norm scaled alike, which leaves every update
// unchanged in exact arithmetic). Torch's own f32 gap is the largest over
// its five f32 runs.
//  - One step: per parameter, Loom's step-0 gradient gap to the f64 run stays
//    within 2x torch's own, or under kGradFloor. Nothing amplifies one
//    step's rounding, so this is where Loom's arithmetic shows; on this
//    machine (2026-12-06) Loom's gaps are 0.8-1.2x torch's first run's.
//  - After the last step: Loom's final-parameter gap to the f64 run stays
//    within 2x torch's own (the largest over its five f32 runs), or under
//    kFinalFloor. Loom's gap is the median over five Loom runs that redraw
//    its rounding the same way (StandardLoomSeeds: the backward seeded with S, eps
//    and the clip norm times S; TrainerOptions::loss_seed).
//    Why a median and not one run: the final gap of one run is a draw from
//    a wide, two-humped distribution. AdamW divides each update by
//    sqrt(v) + eps, so an element whose gradient is near eps or a sum that
//    cancels turns an ordinary f32 rounding into a visible change of its
//    update, which training spreads to every parameter. Measured on
//    DropoutGpt (2026-12-06, AVX-512 Xeon) by tests/parity/noise_draws.py
//    with 24 more torch f32 runs (loss scales 0.25-12, half with rows
//    reversed): one torch run exceeds 2x the largest of five others in 9 of
//    300 random picks, and Loom's single run (seed 1) stood at 2.23x torch's
//    five, above all 24. Loom under 8 seeds spread over the same two humps
//    as torch (median per parameter 0.92-1.46x torch's 24-run median); the
//    median of five torch runs exceeds 2x the largest of five others in 2 of
//    300 picks. A Loom whose arithmetic is consistently worse still fails:
//    its median moves with it.
//    Gaps under kFinalFloor are at f32's own resolution (a few ulps: epsilon
//    is 1.2e-7; the tiny case's torch gaps are 7.6e-8 - 6.9e-7) and pass.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/parity/parity_runner.h"

namespace loom::tests::parity {
namespace {

constexpr double kFinalFactor = 2.0;
constexpr double kFinalFloor = 1e-6;
constexpr double kGradFactor = 2.0;
constexpr double kGradFloor = 1e-7;

void RunParity(const parity::ParityCase& c, int steps) {
  parity::ParityOptions o;
  o.f64_reference = true;
  o.noise_runs = parity::StandardTorchNoiseRuns();
  o.loom_seeds = parity::StandardLoomSeeds();
  ASSERT_TRUE(parity::TorchAvailable(o))
      << o.python << " cannot import torch (scripts/setup.sh installs python3-torch)";
  auto r = parity::RunGptParity(c, steps, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->loss0_rel, 1e-5) << r->loss0 << " vs " << r->torch_loss0;
  EXPECT_LT(r->logits_rel, 1e-5);
  for (const auto& [name, err] : r->grad_rel) EXPECT_LT(err, 1e-4) << "gradient of " << name;
  for (int s = 0; s < steps; ++s)
    EXPECT_LT(r->loss_rel[s], 1e-4) << "step " << s << ": " << r->losses[s] << " vs " << r->torch_losses[s];
  std::printf("%-32s %12s %12s %12s %12s %12s %8s\n", "final parameter", "loom-torch32", "loom-torch64",
              "loom-med-64", "torch32-64", "others-64", "ratio");
  for (const auto& [name, err] : r->final_rel) {
    const double l64 = r->final_rel_f64.at(name), med = r->LoomFinalGap(name), t64 = r->torch_final_rel_f64.at(name);
    const double c64 = r->noise_final_rel_f64.at(name), torch_gap = std::max(t64, c64);
    std::printf("%-32s %12.3e %12.3e %12.3e %12.3e %12.3e %8.2f\n", name.c_str(), err, l64, med, t64, c64,
                torch_gap > 0 ? med / torch_gap : 0.0);
  }
  std::printf("%-32s %12s %12s %12s\n", "step-0 gradient", "loom-torch64", "torch32-64", "others-64");
  double worst_grad = 0;
  for (const auto& [name, err] : r->grad_rel_f64) {
    const double t64 = r->torch_grad_rel_f64.at(name), c64 = r->noise_grad_rel_f64.at(name);
    const double torch_gap = std::max(t64, c64);
    std::printf("%-32s %12.3e %12.3e %12.3e\n", name.c_str(), err, t64, c64);
    if (torch_gap > 0) worst_grad = std::max(worst_grad, err / torch_gap);
    if (err >= kGradFloor)
      EXPECT_LE(err, kGradFactor * torch_gap) << "step-0 gradient of " << name << " against f64: loom " << err
                                              << ", torch " << t64 << " (largest of its other runs " << c64 << ")";
  }
  std::printf("worst step-0 gradient gap over torch's own f32 gap to f64: %.2f\n", worst_grad);
  const parity::NoiseVerdict v = parity::FinalWithinNoise(*r, kFinalFactor, kFinalFloor);
  for (const std::string& f : v.failures) ADD_FAILURE() << "final value of " << f;
  std::printf("worst final gap over torch's own f32 gap to f64: %s\n", v.worst.c_str());
  std::printf("%s: loss %.6f (torch %.6f), worst relative loss gap over %d steps %.2e\n", c.Name().c_str(),
              r->loss0, r->torch_loss0, steps, r->WorstLoss());
}

TEST(GptParity, OddSizesGpt) { RunParity({"gpt", 2, 3, 3, 96, 37, 256, 384, 2}, 50); }
TEST(GptParity, OddSizesLlamaGqa) { RunParity({"llama", 2, 6, 2, 96, 37, 256, 160, 2}, 50); }
TEST(GptParity, SmallVocabTinyGpt) { RunParity({"gpt", 1, 2, 2, 16, 5, 11, 64, 3}, 20); }
// model.dropout 0.2: embedding, residual and attention-probability masks,
// drawn by gpt_torch.py from Loom's mask definition, under the same bounds.
TEST(GptParity, DropoutGpt) { RunParity({"gpt", 2, 3, 3, 96, 37, 256, 384, 2, 0.2f}, 20); }
TEST(GptParity, DropoutLlamaGqa) { RunParity({"llama", 2, 6, 2, 96, 37, 256, 160, 2, 0.2f}, 20); }

}  // namespace
}  // namespace loom::tests::parity
