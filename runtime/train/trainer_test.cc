// The real model's training step allocates nothing after the first step: every
// intermediate lives in the Program's arena, kernel scratch is reused, and
// AdamW writes parameters and state in place. Run on one thread: SDPA's scratch
// pool is shared by the worker threads, so with several threads how many
// buffers it holds depends on scheduling and a later step may still allocate
// one (docs/perf.md notes this).
#include "runtime/train/trainer.h"

#include "base/allocator.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "gtest/gtest.h"

namespace loom::train {
namespace {

Tensor Tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % vocab);
  return x;
}

void ExpectNoAllocationAfterFirstStep(const std::string& family) {
  v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_family(family);
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_n_kv_head(family == "llama" ? 2 : 4);
  m->set_d_model(32);
  m->set_seq_len(16);
  m->set_vocab(64);
  auto* t = spec.mutable_train();
  t->set_batch_size(3);
  t->set_lr(1e-3f);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_grad_clip(1.0f);
  t->set_weight_decay(0.1f);
  Tensor x = Tokens(3, 16, 64, 1), y = Tokens(3, 16, 64, 2);
  SetNumThreads(1);
  CountingAllocator counting(CpuAllocator::Get());
  ScopedDefaultAllocator use(&counting);
  auto trainer = Trainer::Create(spec);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto first = (*trainer)->Step(x, y);
  ASSERT_TRUE(first.ok()) << first.status();
  const int64_t after_first = counting.stats().allocations;
  float last = *first;
  for (int s = 0; s < 3; ++s) {
    auto l = (*trainer)->Step(x, y);
    ASSERT_TRUE(l.ok()) << l.status();
    last = *l;
  }
  EXPECT_EQ(counting.stats().allocations, after_first) << family << ": steps 2-4 allocated";
  EXPECT_LT(last, *first) << family << ": repeated steps on one batch should lower its loss";
}

TEST(Trainer, GptStepAllocatesNothingAfterTheFirst) { ExpectNoAllocationAfterFirstStep("gpt"); }
TEST(Trainer, LlamaStepAllocatesNothingAfterTheFirst) { ExpectNoAllocationAfterFirstStep("llama"); }

}  // namespace
}  // namespace loom::train
