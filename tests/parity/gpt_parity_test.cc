// PyTorch parity of the compiled training step, on identical weights and
// batches: loss, logits and every parameter's gradient at step 0, then the loss
// curve of 50 AdamW steps (with warmup, weight decay and clipping).
// The reference is tests/parity/gpt_torch.py run by Debian's python3-torch.
#include <cstdio>

#include "gtest/gtest.h"
#include "tests/parity/parity_runner.h"

namespace loom {
namespace {

void RunParity(const parity::ParityCase& c, int steps) {
  parity::ParityOptions o;
  if (!parity::TorchAvailable(o)) GTEST_SKIP() << o.python << " cannot import torch";
  auto r = parity::RunGptParity(c, steps, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->loss0_rel, 1e-5) << r->loss0 << " vs " << r->torch_loss0;
  EXPECT_LT(r->logits_rel, 1e-5);
  for (const auto& [name, err] : r->grad_rel) EXPECT_LT(err, 1e-4) << "gradient of " << name;
  for (int s = 0; s < steps; ++s)
    EXPECT_LT(r->loss_rel[s], 1e-4) << "step " << s << ": " << r->losses[s] << " vs " << r->torch_losses[s];
  // The parameters after the last AdamW step: beyond the bounds on loss and
  // gradients above, a check that no update went astray. Adam divides by
  // sqrt(v), so elements whose gradients are near zero turn last-bit
  // differences into O(lr) steps and the gap grows over the steps: it
  // measures 1.1e-4 - 1.5e-4 (llama wq/wk) on an AMD EPYC without AVX-512
  // and under 1e-4 on the other machines it ran on; hence 5e-4 here.
  for (const auto& [name, err] : r->final_rel) EXPECT_LT(err, 5e-4) << "final value of " << name;
  std::printf("%s: loss %.6f (torch %.6f), worst relative loss gap over %d steps %.2e\n", c.Name().c_str(),
              r->loss0, r->torch_loss0, steps, r->WorstLoss());
}

TEST(GptParity, OddSizesGpt) { RunParity({"gpt", 2, 3, 3, 96, 37, 256, 384, 2}, 50); }
TEST(GptParity, OddSizesLlamaGqa) { RunParity({"llama", 2, 6, 2, 96, 37, 256, 160, 2}, 50); }
TEST(GptParity, SmallVocabTinyGpt) { RunParity({"gpt", 1, 2, 2, 16, 5, 11, 64, 3}, 20); }

}  // namespace
}  // namespace loom
