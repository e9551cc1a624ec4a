// SmallSpec: the job spec of a small training run for the trainer's tests
// (parallel/trainer.h and what builds on it), so they share one recipe.
//
//   SmallModel m;  m.family = "llama";  m.n_kv_head = 2;
//   v1::JobSpec spec = SmallSpec(m, /*batch=*/4, /*lr=*/1e-2f, "cuda");
//
// The recipe: AdamW with betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 and
// gradient clipping at 1.0; the model's fields as given (n_kv_head 0: as
// many as n_head); everything else the spec's defaults.
#pragma once

#include <cstdint>
#include <string>

#include "base/rng.h"
#include "base/tensor.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::parallel::testing {

struct SmallModel {
  std::string family = "gpt";
  int n_layer = 1, n_head = 2, n_kv_head = 0, d_model = 16, seq_len = 8, vocab = 32;
};

inline v1::JobSpec SmallSpec(const SmallModel& sm, int batch, float lr, const std::string& device = "cpu") {
  v1::JobSpec spec;
  if (device != "cpu") spec.set_device(device);
  auto* m = spec.mutable_model();
  m->set_family(sm.family);
  m->set_n_layer(sm.n_layer);
  m->set_n_head(sm.n_head);
  m->set_n_kv_head(sm.n_kv_head > 0 ? sm.n_kv_head : sm.n_head);
  m->set_d_model(sm.d_model);
  m->set_seq_len(sm.seq_len);
  m->set_vocab(sm.vocab);
  auto* t = spec.mutable_train();
  t->set_batch_size(batch);
  t->set_lr(lr);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_grad_clip(1.0f);
  t->set_weight_decay(0.1f);
  return spec;
}

// A [b, t] i32 batch of token ids in [0, vocab), deterministic in `seed`
// (Philox): the small models' inputs in the trainer and checkpoint tests.
inline Tensor RandomTokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % vocab);
  return x;
}

}  // namespace loom::parallel::testing
