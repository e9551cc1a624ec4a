#include "compiler/autodiff.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "compiler/optimizer.h"
#include "compiler/passes/cse.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/fusion.h"
#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

AutodiffOptions TestOptions() {
  AutodiffOptions o;
  o.add_op = "test.add";
  o.fill_op = "test.fill";
  return o;
}

// %2 is used by dup and mul (accumulation), %b broadcasts (sum_to in its
// gradient), both dup outputs flow to the loss, %unused gets a zero gradient.
constexpr char kNet[] = R"IR(graph @net(%x: f64[5, 3], %w1: f64[3, 4] param, %b: f64[4] param, %w2: f64[6, 4] param, %unused: f64[2] param) {
  %0 = test.matmul(%x, %w1) : f64[5, 4]
  %1 = test.add(%0, %b) : f64[5, 4]
  %2 = test.relu(%1) : f64[5, 4]
  %3, %4 = test.dup(%2) : f64[5, 4], f64[5, 4]
  %5 = test.mul(%3, %2) : f64[5, 4]
  %6 = test.matmul(%5, %w2) {trans_b=true} : f64[5, 6]
  %7 = test.scale(%6) {s=0.1} : f64[5, 6]
  %8 = test.exp(%7) : f64[5, 6]
  %9 = test.sum(%8) : f64[]
  %10 = test.sum(%4) : f64[]
  %11 = test.add(%9, %10) : f64[]
  return %11, %8
}
)IR";

std::vector<Tensor> Inputs(const ir::Graph& g, DType dt) {
  std::vector<Tensor> in;
  int k = 0;
  for (const ir::GraphInput& i : g.inputs()) {
    const Shape& s = g.meta(i.value).shape;
    std::vector<double> v(NumElements(s));
    for (size_t e = 0; e < v.size(); ++e) v[e] = 0.8 * std::sin(1.3 * e + 2.1 * k) + 0.05;
    in.push_back(Tensor::FromVector(s, v, dt));
    ++k;
  }
  return in;
}

TEST(AutodiffTest, GradientsMatchFiniteDifferences) {
  auto fwd = ir::ParseGraph(kNet);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  auto j = BuildJointGraph(*fwd, TestOptions());
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_EQ(j->wrt_inputs, (std::vector<int>{1, 2, 3, 4}));
  ASSERT_EQ(j->graph.outputs().size(), 6u);

  std::vector<Tensor> in = Inputs(*fwd, DType::kF64);
  auto joint = Executor::Create(j->graph);
  ASSERT_TRUE(joint.ok()) << joint.status();
  auto outs = joint->Run(in);
  ASSERT_TRUE(outs.ok()) << outs.status();
  std::vector<Tensor> grads;
  for (size_t k = 2; k < outs->size(); ++k) grads.push_back((*outs)[k].Clone());

  auto forward = Executor::Create(*fwd);
  ASSERT_TRUE(forward.ok());
  auto loss_at = [&](std::vector<Tensor>& x) { return (*forward->Run(x))[0].GetDouble(0); };
  EXPECT_NEAR(loss_at(in), (*outs)[0].GetDouble(0), 1e-12);
  for (size_t p = 0; p < grads.size(); ++p) {
    const int k = j->wrt_inputs[p];
    Tensor fd = Tensor::Zeros(in[k].shape(), DType::kF64);
    for (int64_t e = 0; e < in[k].numel(); ++e) {
      const double h = 1e-6, x0 = in[k].GetDouble(e);
      in[k].SetDouble(e, x0 + h);
      double up = loss_at(in);
      in[k].SetDouble(e, x0 - h);
      double down = loss_at(in);
      in[k].SetDouble(e, x0);
      fd.SetDouble(e, (up - down) / (2 * h));
    }
    if (k == 4) {
      EXPECT_EQ(grads[p].ToVector(), std::vector<double>(2, 0.0));
    } else {
      EXPECT_LT(RelativeError(grads[p], fd), 1e-7) << "input " << k;
    }
  }
}

}  // namespace
}  // namespace loom::compiler

namespace loom::compiler {
namespace {

TEST(AutodiffTest, JointGraphText) {
  // d/dx sum(x * w) with x used twice: the expected joint graph, beside the input.
  auto fwd = ir::ParseGraph(R"IR(graph @f(%x: f32[3], %w: f32[3] param) {
  %0 = test.mul(%w, %w) : f32[3]
  %1 = test.mul(%0, %x) : f32[3]
  %2 = test.sum(%1) : f32[]
  return %2
}
)IR");
  ASSERT_TRUE(fwd.ok());
  auto j = BuildJointGraph(*fwd, TestOptions());
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(ir::PrintGraph(j->graph), R"IR(graph @f(%x: f32[3], %w: f32[3] param) {
  %0 = test.mul(%w, %w) : f32[3]
  %1 = test.mul(%0, %x) : f32[3]
  %2 = test.sum(%1) : f32[]
  %3 = test.fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %4 = test.broadcast_to(%3) {shape=[3]} : f32[3]
  %5 = test.mul(%4, %x) : f32[3]
  %6 = test.mul(%4, %0) : f32[3]
  %7 = test.mul(%5, %w) : f32[3]
  %8 = test.mul(%5, %w) : f32[3]
  %9 = test.add(%7, %8) : f32[3]
  return %2, %9
}
)IR");
  // %6 (d/dx) is dead and %7/%8 are duplicates: DCE and CSE clean up.
  ir::Graph g = j->graph;
  ASSERT_TRUE(*passes::DeadCodeElimination().Run(g));
  ASSERT_TRUE(*passes::CommonSubexpressionElimination().Run(g));
  EXPECT_EQ(ir::PrintGraph(g), R"IR(graph @f(%x: f32[3], %w: f32[3] param) {
  %0 = test.mul(%w, %w) : f32[3]
  %1 = test.mul(%0, %x) : f32[3]
  %2 = test.sum(%1) : f32[]
  %3 = test.fill() {dtype="f32", shape=[], value=1.0} : f32[]
  %4 = test.broadcast_to(%3) {shape=[3]} : f32[3]
  %5 = test.mul(%4, %x) : f32[3]
  %6 = test.mul(%5, %w) : f32[3]
  %7 = test.add(%6, %6) : f32[3]
  return %2, %7
}
)IR");
}

TEST(AutodiffTest, OptimizedGraphsGiveTheSameGradients) {
  auto fwd = ir::ParseGraph(kNet);
  auto j = BuildJointGraph(*fwd, TestOptions());
  ASSERT_TRUE(j.ok());
  ir::Graph g = j->graph;
  ASSERT_TRUE(passes::CommonSubexpressionElimination().Run(g).ok());
  ASSERT_TRUE(passes::DeadCodeElimination().Run(g).ok());
  ASSERT_TRUE(*passes::ElementwiseFusion().Run(g));
  std::vector<Tensor> in = Inputs(*fwd, DType::kF64);
  auto a = Executor::Create(j->graph);
  auto b = Executor::Create(g);
  ASSERT_TRUE(a.ok() && b.ok());
  auto oa = a->Run(in);
  auto ob = b->Run(in);
  ASSERT_TRUE(oa.ok() && ob.ok());
  for (size_t k = 0; k < oa->size(); ++k) EXPECT_LT(RelativeError((*ob)[k], (*oa)[k]), 1e-14) << k;
}

// AutodiffOptions::seed scales every gradient by itself (f64: the products
// by 2.5 differ from the plain gradients only by rounding); a seed that is
// zero or not finite is refused.
TEST(AutodiffTest, SeedScalesEveryGradient) {
  auto fwd = ir::ParseGraph(kNet);
  ASSERT_TRUE(fwd.ok());
  AutodiffOptions o = TestOptions();
  auto plain = BuildJointGraph(*fwd, o);
  o.seed = 2.5;
  auto scaled = BuildJointGraph(*fwd, o);
  ASSERT_TRUE(plain.ok() && scaled.ok()) << scaled.status();
  std::vector<Tensor> in = Inputs(*fwd, DType::kF64);
  auto a = Executor::Create(plain->graph);
  auto b = Executor::Create(scaled->graph);
  ASSERT_TRUE(a.ok() && b.ok());
  auto oa = a->Run(in);
  auto ob = b->Run(in);
  ASSERT_TRUE(oa.ok() && ob.ok());
  EXPECT_EQ((*ob)[0].GetDouble(0), (*oa)[0].GetDouble(0));  // the loss itself is not scaled
  for (size_t k = 2; k < oa->size(); ++k) {
    std::vector<double> want = (*oa)[k].ToVector();
    for (double& v : want) v *= 2.5;
    EXPECT_LT(RelativeError((*ob)[k], Tensor::FromVector((*oa)[k].shape(), want, DType::kF64)), 1e-14) << k;
  }
  for (double bad : {0.0, std::nan(""), double{INFINITY}}) {
    o.seed = bad;
    auto j = BuildJointGraph(*fwd, o);
    ASSERT_FALSE(j.ok()) << bad;
    EXPECT_NE(std::string(j.status().message()).find("seed must be finite and nonzero"), std::string::npos)
        << j.status();
  }
}

TEST(AutodiffTest, ErrorsNameTheOp) {
  auto fwd = ir::ParseGraph(R"IR(graph @f(%x: f32[3], %w: f32[3] param) {
  %0 = test.relu_grad(%x, %w) : f32[3]
  %1 = test.sum(%0) : f32[]
  return %1
}
)IR");
  ASSERT_TRUE(fwd.ok());
  auto j = BuildJointGraph(*fwd, TestOptions());
  ASSERT_FALSE(j.ok());
  EXPECT_NE(std::string(j.status().message()).find("node 0 (test.relu_grad) has no gradient rule: backward op"),
            std::string::npos)
      << j.status();
  AutodiffOptions o = TestOptions();
  o.wrt = {"nope"};
  EXPECT_FALSE(BuildJointGraph(*fwd, o).ok());
  o = TestOptions();
  o.loss_output = 3;
  EXPECT_FALSE(BuildJointGraph(*fwd, o).ok());
}

// Three AdamW steps through the joint graph against the same update written
// out here from the gradients of a gradient-only graph.
class OptimizerTest : public ::testing::TestWithParam<bool> {};

TEST_P(OptimizerTest, AdamWStepsMatchAHandWrittenUpdate) {
  const bool in_place = GetParam();
  std::string text = kNet;
  for (size_t p; (p = text.find("f64")) != std::string::npos;) text.replace(p, 3, "f32");
  auto fwd = ir::ParseGraph(text);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  auto grads_only = BuildJointGraph(*fwd, TestOptions());
  ASSERT_TRUE(grads_only.ok());
  auto j = BuildJointGraph(*fwd, TestOptions());
  ASSERT_TRUE(j.ok());
  AdamWOptions ao;
  ao.grad_norm_op = "test.grad_norm";
  ao.adamw_op = "test.adamw";
  ao.weight_decay = 0.1;
  ao.max_norm = 0.5;
  ao.beta2 = 0.99;
  ao.decays = [](const std::string& name) { return name != "b"; };
  absl::Status appended = AppendAdamW(*j, ao);
  ASSERT_TRUE(appended.ok()) << appended;
  const ir::Graph& g = j->graph;
  ASSERT_EQ(g.inputs().size(), 5u + 2 + 8);
  EXPECT_EQ(g.inputs()[7].name, "w1.m");
  EXPECT_EQ(g.inputs()[8].kind, ir::InputKind::kState);
  ASSERT_EQ(g.outputs().size(), 2u + 12);
  EXPECT_EQ(g.outputs()[2].updates, 1);

  LoweringOptions lopt;
  lopt.in_place_updates = in_place;
  lopt.in_place_ops = {"test.adamw"};
  auto train = Executor::Create(g, lopt);
  auto grad_exec = Executor::Create(grads_only->graph);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(grad_exec.ok());
  std::vector<Tensor> in = Inputs(*fwd, DType::kF32);
  std::vector<Tensor> state = {Tensor::FromVector({}, {0.01}), Tensor::FromVector({}, {1})};  // lr, step
  for (int k = 1; k <= 4; ++k) {
    state.push_back(Tensor::Zeros(in[k].shape(), DType::kF32));
    state.push_back(Tensor::Zeros(in[k].shape(), DType::kF32));
  }
  std::vector<Tensor> all = in;
  all.insert(all.end(), state.begin(), state.end());
  // Expected values, in double.
  std::vector<std::vector<double>> p(5), m(5), v(5);
  for (int k = 1; k <= 4; ++k) {
    p[k] = in[k].ToVector();
    m[k].assign(p[k].size(), 0.0);
    v[k].assign(p[k].size(), 0.0);
  }
  std::vector<Tensor> outs;
  for (int step = 1; step <= 3; ++step) {
    all[6].SetDouble(0, step);
    std::vector<Tensor> gin(all.begin(), all.begin() + 5);
    auto gouts = grad_exec->Run(gin);
    ASSERT_TRUE(gouts.ok());
    double sq = 0;
    for (int k = 1; k <= 4; ++k)
      for (double x : (*gouts)[k + 1].ToVector()) sq += x * x;
    double clip = std::min(1.0, ao.max_norm / (std::sqrt(sq) + 1e-6));
    for (int k = 1; k <= 4; ++k) {
      std::vector<double> gk = (*gouts)[k + 1].ToVector();
      for (size_t e = 0; e < gk.size(); ++e) {
        double gr = gk[e] * clip;
        m[k][e] = ao.beta1 * m[k][e] + (1 - ao.beta1) * gr;
        v[k][e] = ao.beta2 * v[k][e] + (1 - ao.beta2) * gr * gr;
        double mh = m[k][e] / (1 - std::pow(ao.beta1, step)), vh = v[k][e] / (1 - std::pow(ao.beta2, step));
        const double wd = k == 2 ? 0.0 : ao.weight_decay;  // %b is not decayed
        p[k][e] -= 0.01 * (mh / (std::sqrt(vh) + ao.eps) + wd * p[k][e]);
      }
    }
    ASSERT_TRUE(train->Run(all, &outs).ok());
    ASSERT_TRUE(train->ApplyUpdates(absl::MakeSpan(all), outs).ok());
    for (int k = 1; k <= 4; ++k) {
      Tensor want = Tensor::FromVector(all[k].shape(), p[k], DType::kF64);
      EXPECT_LT(RelativeError(all[k], want), 1e-6) << "step " << step << " param " << k;
    }
  }
  if (in_place) {
    int written = 0;
    for (bool w : train->program().input_written) written += w;
    EXPECT_EQ(written, 12);  // 4 params, their m and v
  }
}

INSTANTIATE_TEST_SUITE_P(CopyOrInPlace, OptimizerTest, ::testing::Bool());

// A forward graph that reads %step (dropout's offset) shares it with the
// optimizer instead of getting a second one; any other %step is refused.
TEST(OptimizerSharing, AForwardStepInputIsShared) {
  std::string text = kNet;
  for (size_t p; (p = text.find("f64")) != std::string::npos;) text.replace(p, 3, "f32");
  for (const char* meta : {"f32[]", "i64[]", "f32[1]"}) {
    std::string with_step = text;
    with_step.replace(with_step.find(") {"), 3, absl::StrCat(", %step: ", meta, ") {"));
    auto fwd = ir::ParseGraph(with_step);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    auto j = BuildJointGraph(*fwd, TestOptions());
    ASSERT_TRUE(j.ok()) << j.status();
    AdamWOptions ao;
    ao.grad_norm_op = "test.grad_norm";
    ao.adamw_op = "test.adamw";
    absl::Status s = AppendAdamW(*j, ao);
    if (std::string(meta) != "f32[]") {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << meta;
      EXPECT_NE(std::string(s.message()).find("the optimizer can share it only as an f32[] input"), std::string::npos)
          << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    int steps = 0;
    for (const ir::GraphInput& in : j->graph.inputs()) steps += in.name == "step";
    EXPECT_EQ(steps, 1);
    EXPECT_EQ(j->graph.FindInput("step"), 5) << "the forward input keeps its place";
    for (const ir::Node& n : j->graph.nodes())
      if (n.op == "test.adamw") EXPECT_EQ(n.inputs.back(), j->graph.inputs()[5].value);
  }
}

}  // namespace
}  // namespace loom::compiler
