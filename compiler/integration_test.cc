// The compiler over the real op library (kernels/cpu, kernels/cpu/nn) with the
// default op names ("add", "fill", "grad_norm", "adamw"): gradients against
// finite differences, a few AdamW steps that lower the loss, and no tensor
// allocation after the first step with the fast kernels.
#include <cmath>

#include "base/allocator.h"
#include "compiler/compile.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

constexpr char kMlp[] = R"IR(graph @mlp(%x: f32[13, 7], %t: f32[13, 3], %w1: f32[7, 9] param, %b1: f32[9] param, %w2: f32[3, 9] param) {
  %0 = matmul(%x, %w1) : f32[13, 9]
  %1 = add(%0, %b1) : f32[13, 9]
  %2 = gelu(%1) {approximate="tanh"} : f32[13, 9]
  %3 = matmul(%2, %w2) {trans_b=true} : f32[13, 3]
  %4 = sub(%3, %t) : f32[13, 3]
  %5 = mul(%4, %4) : f32[13, 3]
  %6 = mean(%5) : f32[]
  return %6
}
)IR";

std::vector<Tensor> Inputs(const ir::Graph& g) {
  std::vector<Tensor> in;
  int k = 0;
  for (const ir::GraphInput& i : g.inputs()) {
    const ir::TensorMeta& m = g.meta(i.value);
    std::vector<double> v(NumElements(m.shape));
    for (size_t e = 0; e < v.size(); ++e) v[e] = 0.5 * std::sin(1.7 * e + 3.1 * k);
    if (i.name == "lr") v = {0.05};
    if (i.name == "step") v = {1};
    if (i.kind == ir::InputKind::kState) v.assign(v.size(), 0.0);
    in.push_back(Tensor::FromVector(m.shape, v, m.dtype));
    ++k;
  }
  return in;
}

TEST(IntegrationTest, GradientsOfRealOpsMatchFiniteDifferences) {
  std::string text = kMlp;
  for (size_t p; (p = text.find("f32")) != std::string::npos;) text.replace(p, 3, "f64");
  auto fwd = ir::ParseGraph(text);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  CompileOptions o;
  o.fuse = true;
  auto c = Compile(*fwd, o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::printf("%s", c->Dump("fused")->c_str());
  Executor joint(std::move(c->program));
  LoweringOptions ref;
  ref.impl = kernels::Impl::kReference;
  auto forward = Executor::Create(*fwd, ref);
  ASSERT_TRUE(forward.ok()) << forward.status();
  std::vector<Tensor> in = Inputs(*fwd);
  auto outs = joint.Run(in);
  ASSERT_TRUE(outs.ok()) << outs.status();
  for (int p = 0; p < 3; ++p) {
    const int k = 2 + p;
    Tensor grad = (*outs)[1 + p].Clone();
    Tensor fd = Tensor::Zeros(in[k].shape(), DType::kF64);
    for (int64_t e = 0; e < in[k].numel(); ++e) {
      const double h = 1e-6, x0 = in[k].GetDouble(e);
      in[k].SetDouble(e, x0 + h);
      double up = (*forward->Run(in))[0].GetDouble(0);
      in[k].SetDouble(e, x0 - h);
      double down = (*forward->Run(in))[0].GetDouble(0);
      in[k].SetDouble(e, x0);
      fd.SetDouble(e, (up - down) / (2 * h));
    }
    EXPECT_LT(RelativeError(grad, fd), 1e-6) << fwd->inputs()[k].name;
  }
}

class TrainingTest : public ::testing::TestWithParam<bool> {};

TEST_P(TrainingTest, AdamWTrainingLowersTheLossWithoutAllocating) {
  LoweringOptions lopt;
  lopt.in_place_updates = GetParam();
  auto fwd = ir::ParseGraph(kMlp);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  CompileOptions o;
  o.adamw = AdamWOptions{};
  o.adamw->max_norm = 1.0;
  o.adamw->weight_decay = 0.01;
  auto c = Compile(*fwd, o);
  ASSERT_TRUE(c.ok()) << c.status();
  const ir::Graph g = c->stages.at("fused");
  std::vector<Tensor> in = Inputs(g);
  CountingAllocator counting(CpuAllocator::Get());
  ScopedDefaultAllocator use(&counting);
  auto exec = Executor::Create(g, lopt);
  ASSERT_TRUE(exec.ok()) << exec.status();
  std::vector<Tensor> outs;
  const int step_input = g.FindInput("step");
  double first = 0, last = 0;
  int64_t after_first = 0;
  for (int step = 1; step <= 30; ++step) {
    in[step_input].SetDouble(0, step);
    ASSERT_TRUE(exec->Run(in, &outs).ok());
    ASSERT_TRUE(exec->ApplyUpdates(absl::MakeSpan(in), outs).ok());
    if (step == 1) {
      first = outs[0].GetDouble(0);
      after_first = counting.stats().allocations;
    }
    last = outs[0].GetDouble(0);
  }
  std::printf("loss %g -> %g; allocations after step 1: %lld\n", first, last,
              static_cast<long long>(counting.stats().allocations - after_first));
  EXPECT_LT(last, 0.5 * first);
  EXPECT_EQ(counting.stats().allocations, after_first);
  static double copy_mode_loss = 0;
  if (!GetParam()) copy_mode_loss = last;
  else EXPECT_EQ(last, copy_mode_loss);  // same arithmetic either way
}

INSTANTIATE_TEST_SUITE_P(CopyOrInPlace, TrainingTest, ::testing::Bool());

// The elementwise ops of imported graphs fuse (a bool chain of comparisons
// and logical ops, a float chain through where) and compute what the unfused
// graph computes.
TEST(IntegrationTest, ComparisonsWhereAndNewMathFuse) {
  auto fwd = ir::ParseGraph(R"IR(graph @masks(%x: f32[6, 8], %y: f32[6, 8], %m: f32[8]) {
  %0 = less(%x, %m) : bool[6, 8]
  %1 = greater(%y, %m) : bool[6, 8]
  %2 = logical_and(%0, %1) : bool[6, 8]
  %3 = logical_not(%2) : bool[6, 8]
  %4 = erf(%x) : f32[6, 8]
  %5 = sin(%4) : f32[6, 8]
  %6 = minimum(%5, %y) : f32[6, 8]
  %7 = where(%3, %6, %y) : f32[6, 8]
  %8 = cos(%7) : f32[6, 8]
  return %8
}
)IR");
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  std::vector<Tensor> outs[2];
  for (bool fuse : {false, true}) {
    CompileOptions o;
    o.differentiate = false;
    o.fuse = fuse;
    auto c = Compile(*fwd, o);
    ASSERT_TRUE(c.ok()) << c.status();
    int fused = 0;
    for (const ir::Node& n : c->stages.at("fused").nodes()) fused += n.op == "fused";
    EXPECT_EQ(fused, fuse ? 2 : 0) << *c->Dump("fused");
    Executor exec(std::move(c->program));
    auto r = exec.Run(Inputs(*fwd));
    ASSERT_TRUE(r.ok()) << r.status();
    for (const Tensor& t : *r) outs[fuse].push_back(t.Clone());
  }
  ASSERT_EQ(outs[0].size(), 1u);
  EXPECT_EQ(outs[0][0].ToVector(), outs[1][0].ToVector());
}

// Dropout's offset reads the training step: the optimizer shares the forward
// graph's %step, masks change from step to step, and the same step (a
// restarted run) gives the same mask again.
TEST(IntegrationTest, DropoutMasksFollowTheTrainingStep) {
  auto fwd = ir::ParseGraph(
      R"IR(graph @drop(%x: f32[13, 7], %t: f32[13, 3], %w1: f32[7, 9] param, %w2: f32[3, 9] param, %step: f32[]) {
  %0 = matmul(%x, %w1) : f32[13, 9]
  %1 = dropout(%0, %step) {p=0.5, seed=3} : f32[13, 9]
  %2 = matmul(%1, %w2) {trans_b=true} : f32[13, 3]
  %3 = sub(%2, %t) : f32[13, 3]
  %4 = mul(%3, %3) : f32[13, 3]
  %5 = mean(%4) : f32[]
  return %5
}
)IR");
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  CompileOptions o;
  o.adamw = AdamWOptions{};
  auto c = Compile(*fwd, o);
  ASSERT_TRUE(c.ok()) << c.status();
  const ir::Graph g = c->stages.at("fused");
  int steps = 0;
  for (const ir::GraphInput& i : g.inputs()) steps += i.name == "step";
  EXPECT_EQ(steps, 1) << "the optimizer shares %step";
  auto exec = Executor::Create(g);
  ASSERT_TRUE(exec.ok()) << exec.status();
  const std::vector<Tensor> in = Inputs(g);
  const int k = g.FindInput("step");
  auto loss_at = [&](int step) {
    std::vector<Tensor> run = in;
    run[k] = Tensor::FromVector({}, {static_cast<double>(step)});
    auto outs = exec->Run(run);
    EXPECT_TRUE(outs.ok()) << outs.status();
    return outs.ok() ? (*outs)[0].GetDouble(0) : NAN;
  };
  const double l1 = loss_at(1), l2 = loss_at(2), l1_again = loss_at(1);
  EXPECT_NE(l1, l2);
  EXPECT_EQ(l1, l1_again);
  // A forward %step that is not f32[] cannot be shared.
  auto bad = ir::ParseGraph(R"IR(graph @bad(%x: f32[4], %w: f32[4] param, %step: i64[]) {
  %0 = dropout(%x, %step) {p=0.5} : f32[4]
  %1 = mul(%0, %w) : f32[4]
  %2 = sum(%1) : f32[]
  return %2
}
)IR");
  ASSERT_TRUE(bad.ok()) << bad.status();
  auto cb = Compile(*bad, o);
  ASSERT_FALSE(cb.ok());
  EXPECT_NE(std::string(cb.status().message()).find("the optimizer can share it only as an f32[] input"),
            std::string::npos)
      << cb.status();
}

}  // namespace
}  // namespace loom::compiler
