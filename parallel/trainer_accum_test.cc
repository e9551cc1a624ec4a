// Gradient accumulation in the trainer core (train.grad_accum_steps).
//
// One update of k micro-batches of B/k rows against one step of batch B on
// the same rows: the mean accumulated gradient is within 1e-6 of the
// full-batch gradient relative in norm, and the losses of the next 10
// updates agree within 1e-5. The same bound separates a single micro-batch's
// gradient from the full batch's by orders of magnitude, so it can fail.
// Restoring State() after an update resumes bit for bit.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "base/allocator.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "parallel/trainer.h"

namespace loom::parallel {
namespace {

constexpr int64_t kB = 8, kT = 16, kV = 64;

Tensor Tokens(int64_t b, int64_t t, uint64_t seed) {
  Tensor x = Tensor::MustEmpty({b, t}, DType::kI32);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(rng.Bits(i) % kV);
  return x;
}

v1::JobSpec Spec(int accum, int64_t batch = kB) {
  v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_family("gpt");
  m->set_n_layer(2);
  m->set_n_head(4);
  m->set_n_kv_head(4);
  m->set_d_model(32);
  m->set_seq_len(kT);
  m->set_vocab(kV);
  auto* t = spec.mutable_train();
  t->set_batch_size(static_cast<int32_t>(batch));
  t->set_grad_accum_steps(accum);
  t->set_lr(3e-3f);
  t->set_beta1(0.9f);
  t->set_beta2(0.95f);
  t->set_eps(1e-8f);
  t->set_grad_clip(1.0f);  // clipping acts on the mean gradient
  t->set_weight_decay(0.1f);
  t->set_seed(5);
  return spec;
}

std::unique_ptr<Trainer> Make(const v1::JobSpec& spec) {
  TrainerOptions o;
  o.keep_gradients = true;
  auto t = Trainer::Create(spec, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// ||a - b|| / ||b|| over every parameter's gradient.
double RelativeDistance(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  double diff = 0, norm = 0;
  for (const auto& [name, gb] : b) {
    const Tensor& ga = a.at(name);
    EXPECT_EQ(ga.shape(), gb.shape()) << name;
    for (int64_t e = 0; e < gb.numel(); ++e) {
      const double d = double{ga.data<float>()[e]} - gb.data<float>()[e];
      diff += d * d;
      norm += double{gb.data<float>()[e]} * gb.data<float>()[e];
    }
  }
  return std::sqrt(diff / norm);
}

TEST(GradAccum, FourMicroBatchesMatchOneBatch) {
  SetNumThreads(2);
  auto full = Make(Spec(1)), accum = Make(Spec(4));
  ASSERT_TRUE(full && accum);
  EXPECT_EQ(accum->BatchRows(), std::make_pair(int64_t{0}, kB));
  const Tensor x = Tokens(kB, kT, 1), y = Tokens(kB, kT, 2);
  auto lf = full->Step(x, y), la = accum->Step(x, y);
  ASSERT_TRUE(lf.ok()) << lf.status();
  ASSERT_TRUE(la.ok()) << la.status();
  EXPECT_NEAR(*la, *lf, 1e-5);
  const auto gf = full->LastGradients(), ga = accum->LastGradients();
  ASSERT_EQ(ga.size(), accum->param_info().size());
  const double rel = RelativeDistance(ga, gf);
  std::printf("accumulated vs full-batch gradient: %.3g relative in norm; losses %.7f vs %.7f\n", rel, *la, *lf);
  EXPECT_LT(rel, 1e-6) << "accumulated gradient vs the full batch's";

  // The bound can fail: one micro-batch's gradient alone is far from it.
  auto part = Make(Spec(1, kB / 4));
  ASSERT_TRUE(part);
  ASSERT_TRUE(part->Step(x.Narrow(0, 0, kB / 4).Clone(), y.Narrow(0, 0, kB / 4).Clone()).ok());
  EXPECT_GT(RelativeDistance(part->LastGradients(), gf), 1e-2);

  for (int s = 0; s < 10; ++s) {
    const Tensor xs = Tokens(kB, kT, 10 + 2 * s), ys = Tokens(kB, kT, 11 + 2 * s);
    auto a = full->Step(xs, ys), b = accum->Step(xs, ys);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    EXPECT_NEAR(*b, *a, 1e-5) << "update " << s + 2;
    if (s == 9) std::printf("update 11: losses %.7f vs %.7f\n", *b, *a);
  }
  EXPECT_EQ(accum->step(), 11);
}

// After the first update an update allocates nothing (one thread: see
// trainer_test.cc for why).
TEST(GradAccum, UpdateAllocatesNothingAfterTheFirst) {
  SetNumThreads(1);
  const Tensor x = Tokens(kB, kT, 1), y = Tokens(kB, kT, 2);
  CountingAllocator counting(CpuAllocator::Get());
  ScopedDefaultAllocator use(&counting);
  auto t = Trainer::Create(Spec(4));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Step(x, y).ok());
  const int64_t after_first = counting.stats().allocations;
  for (int s = 0; s < 3; ++s) ASSERT_TRUE((*t)->Step(x, y).ok());
  EXPECT_EQ(counting.stats().allocations, after_first) << "updates 2-4 allocated";
  SetNumThreads(2);
}

// An update's batch must hold k micro-batches; a wrong one is refused by name
// and moves nothing.
TEST(GradAccum, WrongBatchIsRefusedByName) {
  auto t = Make(Spec(4));
  ASSERT_TRUE(t);
  auto r = t->Step(Tokens(kB / 4, kT, 1), Tokens(kB / 4, kT, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "input 'x'")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "train.grad_accum_steps = 4")) << r.status();
  EXPECT_EQ(t->step(), 0);
  auto missing = t->Step(Batch{{"x", Tokens(kB, kT, 1)}});
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "data inputs are {x, y}")) << missing.status();
  Tensor f = Tensor::Zeros({kB, kT}, DType::kF32);
  auto dtype = t->Step(Tokens(kB, kT, 1), f);
  ASSERT_FALSE(dtype.ok());
  EXPECT_TRUE(absl::StrContains(dtype.status().message(), "input 'y'")) << dtype.status();
  EXPECT_EQ(t->step(), 0);
}

// Accumulation runs on the CPU: device: cuda is refused by name (parallel
// layouts are checked in tests/parallel/accum_parity_test.cc).
TEST(GradAccum, CudaIsRefusedByName) {
  v1::JobSpec spec = Spec(2);
  spec.set_device("cuda");
  auto t = Trainer::Create(spec);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "train.grad_accum_steps")) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "device: cuda")) << t.status();
}

// State() holds parameters and both moments (the update program's): copying
// it into a fresh trainer after 2 updates and running 2 more gives the
// parameters of 4 uninterrupted updates bit for bit.
TEST(GradAccum, ResumeFromStateIsBitwise) {
  auto Batch = [](int s) { return std::make_pair(Tokens(kB, kT, 40 + 2 * s), Tokens(kB, kT, 41 + 2 * s)); };
  auto straight = Make(Spec(2)), first = Make(Spec(2)), second = Make(Spec(2));
  ASSERT_TRUE(straight && first && second);
  for (int s = 0; s < 4; ++s) ASSERT_TRUE(straight->Step(Batch(s).first, Batch(s).second).ok());
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(first->Step(Batch(s).first, Batch(s).second).ok());
  auto from = first->State(), to = second->State();
  ASSERT_TRUE(from.ok() && to.ok());
  ASSERT_EQ(from->size(), to->size());
  EXPECT_EQ(static_cast<int64_t>(from->size()), 3 * static_cast<int64_t>(first->param_info().size()));
  for (size_t i = 0; i < from->size(); ++i) {
    ASSERT_EQ((*from)[i].name, (*to)[i].name);
    ASSERT_TRUE((*to)[i].local.CopyFrom((*from)[i].local).ok());
  }
  second->set_step(first->step());
  for (int s = 2; s < 4; ++s) ASSERT_TRUE(second->Step(Batch(s).first, Batch(s).second).ok());
  const auto want = straight->LocalParameters(), got = second->LocalParameters();
  for (const auto& [name, w] : want)
    EXPECT_EQ(std::memcmp(w.data<float>(), got.at(name).data<float>(), w.nbytes()), 0) << name;
}

}  // namespace
}  // namespace loom::parallel
