// The trainer core on one rank.
//
// The real model's training step allocates nothing after the first step: every
// intermediate lives in the Program's arena, kernel scratch is reused, and
// AdamW writes parameters and state in place. Run on one thread: SDPA's scratch
// pool is shared by the worker threads, so with several threads how many
// buffers it holds depends on scheduling and a later step may still allocate
// one (docs/perf.md notes this). Activation checkpointing leaves the
// parameters bitwise those of a plain run and shrinks the arena.
#include "parallel/trainer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "base/allocator.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "parallel/testing/small_spec.h"

namespace loom::parallel {
namespace {

v1::JobSpec Spec(const std::string& family) {
  testing::SmallModel m;
  m.family = family;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = family == "llama" ? 2 : 4;
  m.d_model = 32;
  m.seq_len = 16;
  m.vocab = 64;
  return testing::SmallSpec(m, 3, 1e-3f);
}

void ExpectNoAllocationAfterFirstStep(const std::string& family) {
  const v1::JobSpec spec = Spec(family);
  Tensor x = testing::RandomTokens(3, 16, 64, 1), y = testing::RandomTokens(3, 16, 64, 2);
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

// Sampling runs a one-row program on one rank: row 0's logits equal those of
// the evaluation program at the training batch (3 rows) to f32 rounding.
TEST(Trainer, SampleLogitsIsRowZeroOfTheEvaluation) {
  for (const char* family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    auto trainer = Trainer::Create(Spec(family));
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_EQ((*trainer)->SampleRows(), 1);
    Tensor x = testing::RandomTokens(3, 16, 64, 5), y = testing::RandomTokens(3, 16, 64, 6);
    auto whole = (*trainer)->Forward(x, y);
    ASSERT_TRUE(whole.ok()) << whole.status();
    auto row = (*trainer)->SampleLogits(x.Narrow(0, 0, 1).Clone());
    ASSERT_TRUE(row.ok()) << row.status();
    ASSERT_EQ(row->shape(), (Shape{16, 64}));
    EXPECT_LT(RelativeError(*row, whole->second.Narrow(0, 0, 16).Clone()), 1e-6);
  }
}

// A batch must name exactly the program's data inputs, in their global shape
// and dtype; anything else is InvalidArgument naming the input, and the step
// count does not move.
TEST(Trainer, BadBatchesAreRefusedByName) {
  auto trainer = Trainer::Create(Spec("gpt"));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Trainer& t = **trainer;
  const Tensor x = testing::RandomTokens(3, 16, 64, 1), y = testing::RandomTokens(3, 16, 64, 2);
  struct Case {
    const char* what;
    Batch batch;
    const char* names;
  };
  const Case cases[] = {
      {"missing y", {{"x", x}}, "the batch has {x}"},
      {"extra input", {{"x", x}, {"y", y}, {"mask", x}}, "the batch has {mask, x, y}"},
      {"wrong name", {{"x", x}, {"targets", y}}, "data inputs are {x, y}"},
      {"short sequence", {{"x", x.Narrow(1, 0, 8).Clone()}, {"y", y}}, "input 'x' is i32[3, 8]"},
      {"wrong dtype", {{"x", x}, {"y", y.To(DType::kI64)}}, "input 'y' is i64[3, 16]"},
  };
  for (const Case& c : cases) {
    auto step = t.Step(c.batch);
    ASSERT_FALSE(step.ok()) << c.what;
    EXPECT_TRUE(absl::IsInvalidArgument(step.status())) << c.what << ": " << step.status();
    EXPECT_TRUE(absl::StrContains(step.status().message(), c.names)) << c.what << ": " << step.status();
    auto eval = t.Evaluate(c.batch);
    ASSERT_FALSE(eval.ok()) << c.what;
    EXPECT_TRUE(absl::StrContains(eval.status().message(), c.names)) << c.what << ": " << eval.status();
  }
  EXPECT_EQ(t.step(), 0);
  auto ok = t.Step(x, y);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(t.step(), 1);
}

// One rank holds every parameter and AdamW moment whole, replicated, as the
// checkpoint state; writing into it changes what the next step computes.
TEST(Trainer, StateIsEveryParameterAndMomentWhole) {
  auto trainer = Trainer::Create(Spec("llama"));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Trainer& t = **trainer;
  auto state = t.State();
  ASSERT_TRUE(state.ok()) << state.status();
  // StateLayout: the same entries without their data.
  const std::vector<Trainer::StateTensor> layout = t.StateLayout();
  ASSERT_EQ(layout.size(), state->size());
  for (size_t i = 0; i < layout.size(); ++i) {
    EXPECT_EQ(layout[i].name, (*state)[i].name);
    EXPECT_EQ(layout[i].is_param, (*state)[i].is_param);
    EXPECT_EQ(layout[i].global_shape, (*state)[i].global_shape);
    EXPECT_TRUE(layout[i].spec == (*state)[i].spec) << layout[i].name;
    EXPECT_FALSE(layout[i].local.defined()) << layout[i].name;
  }
  int params = 0, moments = 0;
  for (const auto& s : *state) {
    (s.is_param ? params : moments)++;
    EXPECT_EQ(Shape(s.global_shape.begin(), s.global_shape.end()), s.local.shape()) << s.name;
    EXPECT_FALSE(s.spec.has_partial()) << s.name;
    for (const auto& p : s.spec.placements) EXPECT_TRUE(p.is_replicate()) << s.name;
  }
  EXPECT_EQ(params, static_cast<int>(t.param_info().size()));
  EXPECT_EQ(moments, 2 * params);
  const Tensor x = testing::RandomTokens(3, 16, 64, 1), y = testing::RandomTokens(3, 16, 64, 2);
  auto before = t.Evaluate(x, y);
  ASSERT_TRUE(before.ok()) << before.status();
  for (auto& s : *state)
    if (s.is_param) ASSERT_TRUE(s.local.CopyFrom(Tensor::Zeros(s.local.shape(), DType::kF32)).ok());
  auto after = t.Evaluate(x, y);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(*before, *after);
  // All-zero weights give uniform logits: the loss is log(vocab).
  EXPECT_NEAR(*after, std::log(64.0), 1e-5);
}

// train.activation_checkpointing: blocks (selective) recomputes each block's
// forward ops (the cheap ones) in the backward pass: the parameters after a
// few steps equal the plain run's bit for bit (dropout included: the clones
// regenerate its masks), and the memory plan's arena shrinks.
TEST(Trainer, ActivationCheckpointingKeepsParametersBitwiseAndShrinksTheArena) {
  for (const char* family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    v1::JobSpec spec;
    auto* m = spec.mutable_model();
    m->set_family(family);
    m->set_n_layer(3);
    m->set_n_head(2);
    m->set_d_model(32);
    m->set_seq_len(32);
    m->set_vocab(64);
    m->set_dropout(0.1f);
    auto* t = spec.mutable_train();
    t->set_batch_size(4);
    t->set_lr(3e-3f);
    t->set_beta1(0.9f);
    t->set_beta2(0.95f);
    t->set_eps(1e-8f);
    t->set_grad_clip(1.0f);
    const char* modes[3] = {"none", "blocks", "selective"};
    std::map<std::string, Tensor> params[3];
    int64_t arena[3];
    for (int ac = 0; ac < 3; ++ac) {
      t->set_activation_checkpointing(modes[ac]);
      auto trainer = Trainer::Create(spec);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      for (int s = 0; s < 3; ++s) {
        auto l = (*trainer)->Step(testing::RandomTokens(4, 32, 64, 10 + s), testing::RandomTokens(4, 32, 64, 20 + s));
        ASSERT_TRUE(l.ok()) << l.status();
      }
      params[ac] = (*trainer)->Parameters();
      arena[ac] = (*trainer)->compilation().plan.peak_bytes;
    }
    for (int ac = 1; ac < 3; ++ac) {
      ASSERT_EQ(params[0].size(), params[ac].size());
      for (const auto& [name, p] : params[0]) {
        const Tensor& q = params[ac].at(name);
        ASSERT_EQ(p.numel(), q.numel());
        EXPECT_EQ(std::memcmp(p.data<float>(), q.data<float>(), sizeof(float) * p.numel()), 0) << modes[ac] << " " << name;
      }
      EXPECT_LT(arena[ac], arena[0]) << modes[ac];
    }
    std::printf("%s: arena %lld bytes plain, %lld with blocks, %lld selective\n", family,
                static_cast<long long>(arena[0]), static_cast<long long>(arena[1]), static_cast<long long>(arena[2]));
  }
}

// train.deterministic reaches the CUDA executor's options (through the
// executor seam, no GPU) and the plan PlanCudaStep checks a job with: the
// sorted embedding backward instead of the atomic one.
TEST(Trainer, DeterministicReachesTheCudaExecutorAndPlan) {
  for (bool det : {false, true}) {
    v1::JobSpec spec = Spec("gpt");
    spec.set_device("cuda");
    spec.mutable_train()->set_deterministic(det);
    auto model = FamilyModel(spec);
    ASSERT_TRUE(model.ok()) << model.status();
    auto step = PlanCudaStep(spec, *model);
    ASSERT_TRUE(step.ok()) << step.status();
    int atomic = 0, sorted = 0;
    for (const compiler::cuda::Launch& l : step->plan.launches) {
      atomic += l.kind == compiler::cuda::LaunchKind::kEmbeddingBackward;
      sorted += l.kind == compiler::cuda::LaunchKind::kEmbeddingBackwardSorted;
    }
    EXPECT_EQ(atomic, det ? 0 : 1) << step->plan.Describe();
    EXPECT_EQ(sorted, det ? 1 : 0) << step->plan.Describe();

    bool called = false;
    compiler::cuda::CudaOptions seen;
    TrainerOptions o;
    o.make_cuda_executor = [&](const compiler::ir::Graph&, const compiler::cuda::CudaOptions& co)
        -> absl::StatusOr<std::unique_ptr<compiler::cuda::CudaExecutor>> {
      called = true;
      seen = co;
      return absl::FailedPreconditionError("options recorded");
    };
    auto t = Trainer::Create(spec, std::move(*model), std::move(o));
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(absl::StrContains(t.status().message(), "options recorded")) << t.status();
    ASSERT_TRUE(called);
    EXPECT_EQ(seen.deterministic, det);
    EXPECT_FALSE(seen.bf16);
  }
}

}  // namespace
}  // namespace loom::parallel
