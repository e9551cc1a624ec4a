// The planner's peak-memory estimate against what Loom actually allocates:
// for the single-process layout (dp = 1, tp = 1) on small GPT and Llama
// configs, the high-water mark of a CountingAllocator around Trainer::Create
// and a few Steps must be within 15% of the estimate's total. (Multi-rank
// layouts are measured by the SPMD runner against Estimate(...) per layout.)
#include <cmath>

#include "base/allocator.h"
#include "base/rng.h"
#include "base/testing/full_sweep.h"
#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "parallel/planner.h"
#include "runtime/train/trainer.h"

namespace loom::parallel {
namespace {

Tensor Tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % vocab);
  return x;
}

struct Config {
  const char* family;
  int n_layer, n_head, n_kv_head, d_model, seq_len, vocab, batch;
};

v1::JobSpec Spec(const Config& c) {
  v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_family(c.family);
  m->set_n_layer(c.n_layer);
  m->set_n_head(c.n_head);
  m->set_n_kv_head(c.n_kv_head);
  m->set_d_model(c.d_model);
  m->set_seq_len(c.seq_len);
  m->set_vocab(c.vocab);
  m->set_norm_eps(1e-5f);
  m->set_rope_theta(10000.f);
  m->set_ffn_hidden(std::string(c.family) == "llama" ? (8 * c.d_model / 3 + 63) / 64 * 64 : 4 * c.d_model);
  auto* t = spec.mutable_train();
  t->set_batch_size(c.batch);
  t->set_lr(1e-3f);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_grad_clip(1.0f);
  t->set_weight_decay(0.1f);
  return spec;
}

// Measured peak bytes of Create + 3 steps (the batch tensors included).
int64_t MeasuredPeak(const v1::JobSpec& spec) {
  const auto& m = spec.model();
  const int64_t B = spec.train().batch_size();
  CountingAllocator counting(CpuAllocator::Get());
  ScopedDefaultAllocator use(&counting);
  Tensor x = Tokens(B, m.seq_len(), m.vocab(), 1), y = Tokens(B, m.seq_len(), m.vocab(), 2);
  auto trainer = train::Trainer::Create(spec);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return -1;
  for (int s = 0; s < 3; ++s) {
    auto l = (*trainer)->Step(x, y);
    EXPECT_TRUE(l.ok()) << l.status();
  }
  return counting.stats().peak_bytes;
}

TEST(PlannerMemory, SingleProcessEstimateWithin15PercentOfMeasuredPeak) {
  SetNumThreads(1);
  std::vector<Config> configs = {
      {"gpt", 2, 4, 4, 64, 32, 256, 4},       {"gpt", 2, 4, 4, 128, 64, 256, 8},
      {"gpt", 4, 8, 8, 128, 32, 512, 4},      {"llama", 2, 4, 2, 64, 32, 256, 4},
      {"llama", 2, 4, 2, 128, 64, 256, 8},    {"llama", 4, 8, 4, 128, 32, 512, 4},
  };
  if (loom::testing::FullSweep()) {
    configs.push_back({"gpt", 6, 8, 8, 256, 128, 1024, 8});
    configs.push_back({"llama", 6, 8, 2, 256, 128, 1024, 8});
    configs.push_back({"gpt", 1, 2, 2, 32, 16, 256, 1});
    configs.push_back({"llama", 1, 2, 1, 32, 16, 256, 1});
  }
  for (const Config& c : configs) {
    v1::JobSpec spec = Spec(c);
    Hardware hw;
    hw.world = 1;
    auto est = Estimate(spec.model(), c.batch, hw, {1, 1, 0, false});
    ASSERT_TRUE(est.ok()) << est.status();
    const int64_t measured = MeasuredPeak(spec);
    const double estimate = static_cast<double>(est->memory.total());
    const double err = std::abs(estimate - measured) / measured;
    EXPECT_LT(err, 0.15) << c.family << " L=" << c.n_layer << " C=" << c.d_model << " T=" << c.seq_len
                         << " B=" << c.batch << ": estimate " << estimate << " measured " << measured;
    std::printf("%-5s L=%d H=%d C=%d T=%d V=%d B=%d: estimate %.0f measured %lld (%+.1f%%)\n", c.family,
                c.n_layer, c.n_head, c.d_model, c.seq_len, c.vocab, c.batch, estimate,
                static_cast<long long>(measured), 100.0 * (estimate - measured) / measured);
  }
}

}  // namespace
}  // namespace loom::parallel
