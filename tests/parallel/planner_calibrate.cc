// Calibration tool for the planner's memory model (not a test): prints, for a
// sweep of small single-process configs, the measured allocator high-water
// mark around Trainer::Create + 2 steps and the parameter count (the fit in
// planner.cc uses peak - 16 x parameter bytes). "arena"/"live" are the
// Compilation's plan of the fused graph, before lowering drops the in-place
// updates; planner_layouts.cc prints the lowered programs' real arenas.
//
//   bazel run //tests/parallel:planner_calibrate
#include <cstdio>

#include "base/allocator.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "runtime/train/trainer.h"

namespace {

loom::Tensor Tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  loom::Tensor x = loom::Tensor::MustEmpty({b, t}, loom::DType::kI32);
  loom::Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % vocab);
  return x;
}

void Measure(const char* fam, int L, int H, int KV, int C, int T, int V, int B, int F) {
  loom::v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_family(fam);
  m->set_n_layer(L);
  m->set_n_head(H);
  m->set_n_kv_head(KV);
  m->set_d_model(C);
  m->set_seq_len(T);
  m->set_vocab(V);
  m->set_ffn_hidden(F);
  m->set_norm_eps(1e-5f);
  m->set_rope_theta(10000.f);
  auto* t = spec.mutable_train();
  t->set_batch_size(B);
  t->set_lr(1e-3f);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_grad_clip(1.0f);
  t->set_weight_decay(0.1f);
  loom::Tensor x = Tokens(B, T, V, 1), y = Tokens(B, T, V, 2);
  loom::CountingAllocator counting(loom::CpuAllocator::Get());
  int64_t peak = 0, arena = 0, live = 0, P = 0;
  {
    loom::ScopedDefaultAllocator use(&counting);
    auto tr = loom::train::Trainer::Create(spec);
    if (!tr.ok()) {
      std::printf("%s: %s\n", fam, std::string(tr.status().message()).c_str());
      return;
    }
    for (int s = 0; s < 2; ++s) (void)(*tr)->Step(x, y);
    peak = counting.stats().peak_bytes;
    arena = (*tr)->compilation().plan.peak_bytes;
    live = (*tr)->compilation().plan.live_bytes_bound;
    P = (*tr)->num_parameters();
  }
  std::printf("%s L=%d H=%d KV=%d C=%d T=%d V=%d B=%d F=%d | P=%lld peak=%lld arena=%lld live=%lld state=%lld rest=%lld\n",
              fam, L, H, KV, C, T, V, B, F, (long long)P, (long long)peak, (long long)arena, (long long)live,
              (long long)(12 * P), (long long)(peak - arena - 12 * P));
}

}  // namespace

int main() {
  loom::SetNumThreads(1);
  for (int L : {1, 2, 4})
    Measure("gpt", L, 4, 4, 64, 32, 256, 4, 256);
  for (int C : {32, 128})
    Measure("gpt", 2, 4, 4, C, 32, 256, 4, 4 * C);
  for (int T : {16, 64})
    Measure("gpt", 2, 4, 4, 64, T, 256, 4, 256);
  for (int B : {1, 8})
    Measure("gpt", 2, 4, 4, 64, 32, 256, B, 256);
  Measure("gpt", 2, 4, 4, 64, 32, 1024, 4, 256);
  Measure("gpt", 2, 4, 4, 64, 32, 256, 4, 512);
  for (int L : {1, 2, 4})
    Measure("llama", L, 4, 2, 64, 32, 256, 4, 192);
  Measure("llama", 2, 4, 2, 128, 32, 256, 4, 384);
  Measure("llama", 2, 4, 2, 64, 64, 256, 4, 192);
  Measure("llama", 2, 4, 2, 64, 32, 256, 8, 192);
  Measure("llama", 2, 4, 2, 64, 32, 1024, 4, 192);
  Measure("llama", 2, 4, 4, 64, 32, 256, 4, 384);
  Measure("gpt", 2, 4, 4, 128, 64, 256, 32, 512);
  Measure("gpt", 6, 8, 8, 256, 128, 1024, 8, 1024);
  Measure("llama", 6, 8, 2, 256, 128, 1024, 8, 704);
  Measure("gpt", 1, 2, 2, 32, 16, 256, 1, 128);
  Measure("llama", 1, 2, 1, 32, 16, 256, 1, 128);
  Measure("gpt", 3, 6, 6, 192, 96, 512, 2, 768);
  Measure("llama", 3, 6, 3, 192, 96, 512, 2, 512);
  Measure("gpt", 4, 8, 8, 128, 32, 512, 4, 512);
  Measure("llama", 4, 8, 4, 128, 32, 512, 4, 384);
  Measure("gpt", 2, 16, 16, 256, 64, 256, 4, 1024);
  Measure("llama", 2, 16, 4, 256, 64, 256, 4, 704);
  return 0;
}
