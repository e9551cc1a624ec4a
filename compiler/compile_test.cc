#include "compiler/compile.h"

#include <cmath>
#include <functional>

#include "absl/strings/match.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

constexpr char kNet[] = R"IR(graph @net(%x: f32[7, 3], %w1: f32[3, 5] param, %b: f32[5] param, %w2: f32[6, 5] param) {
  %0 = test.matmul(%x, %w1) : f32[7, 5]
  %1 = test.add(%0, %b) : f32[7, 5]
  %2 = test.relu(%1) : f32[7, 5]
  %3 = test.mul(%2, %2) : f32[7, 5]
  %4 = test.matmul(%3, %w2) {trans_b=true} : f32[7, 6]
  %5 = test.scale(%4) {s=0.1} : f32[7, 6]
  %6 = test.exp(%5) : f32[7, 6]
  %7 = test.sum(%6) : f32[]
  return %7
}
)IR";

CompileOptions TestOptions() {
  CompileOptions o;
  o.autodiff.add_op = "test.add";
  o.autodiff.fill_op = "test.fill";
  AdamWOptions a;
  a.grad_norm_op = "test.grad_norm";
  a.adamw_op = "test.adamw";
  a.max_norm = 1.0;
  a.weight_decay = 0.01;
  a.keep_gradients = true;
  o.adamw = a;
  return o;
}

// Deterministic inputs by name, so graphs with different signatures get
// matching values.
std::vector<Tensor> InputsFor(const ir::Graph& g) {
  std::vector<Tensor> in;
  for (const ir::GraphInput& i : g.inputs()) {
    const ir::TensorMeta& m = g.meta(i.value);
    std::vector<double> v(NumElements(m.shape));
    size_t h = std::hash<std::string>()(i.name) % 97;
    for (size_t e = 0; e < v.size(); ++e) {
      double s = std::sin(0.7 * e + h);
      v[e] = i.name == "lr" ? 0.01 : i.name == "step" ? 3 : absl::EndsWith(i.name, ".v") ? 0.01 * s * s : s;
    }
    in.push_back(Tensor::FromVector(m.shape, v, m.dtype));
  }
  return in;
}

std::vector<std::vector<double>> RunGraph(const ir::Graph& g, const std::vector<Tensor>& in) {
  auto exec = Executor::Create(g);
  EXPECT_TRUE(exec.ok()) << exec.status();
  if (!exec.ok()) return {};
  auto outs = exec->Run(in);
  EXPECT_TRUE(outs.ok()) << outs.status();
  std::vector<std::vector<double>> r;
  for (const Tensor& t : *outs) r.push_back(t.ToVector());
  return r;
}

TEST(CompileTest, EveryDumpParsesBackAndReExecutesToTheSameResult) {
  auto fwd = ir::ParseGraph(kNet);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  auto c = Compile(*fwd, TestOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::vector<double>> joint_result;
  for (const std::string& stage : StageNames()) {
    SCOPED_TRACE(stage);
    auto text = c->Dump(stage);
    ASSERT_TRUE(text.ok()) << text.status();
    auto parsed = ir::ParseGraph(*text);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << *text;
    const ir::Graph& original = c->stages.at(stage);
    std::vector<Tensor> in = InputsFor(original);
    auto want = RunGraph(original, in);
    auto got = RunGraph(*parsed, in);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(got, want);
    if (stage == "joint") joint_result = want;
    if (stage != "initial") {
      EXPECT_EQ(want, joint_result) << "stages after autodiff compute the same thing";
    } else {
      EXPECT_EQ(want[0], RunGraph(*fwd, in)[0]);
    }
  }
  // The compiled program gives the same result too.
  ASSERT_NE(c->program, nullptr);
  Executor exec(std::move(c->program));
  auto outs = exec.Run(InputsFor(c->stages.at("fused")));
  ASSERT_TRUE(outs.ok()) << outs.status();
  EXPECT_EQ((*outs)[0].ToVector(), joint_result[0]);
}

TEST(CompileTest, ReportsPassesAndStages) {
  auto fwd = ir::ParseGraph(kNet);
  auto c = Compile(*fwd, TestOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> names;
  for (const passes::PassReport& r : c->reports) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"simplify", "cse", "dce", "fusion", "memory-plan"}));
  EXPECT_TRUE(c->reports[3].changed);    // something fused
  EXPECT_FALSE(c->reports[4].changed);   // planning never rewrites
  auto planned = c->Dump("planned");
  ASSERT_TRUE(planned.ok());
  EXPECT_TRUE(absl::StartsWith(*planned, "# arena: peak_bytes=")) << *planned;
  EXPECT_NE(planned->find("  # offset="), std::string::npos);
  EXPECT_GE(c->plan.peak_bytes, c->plan.live_bytes_bound);
  auto bad = c->Dump("final");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("initial, joint, optimized, fused, planned"), std::string::npos);
  if (std::getenv("LOOM_PRINT_DUMPS")) {
    for (const std::string& s : StageNames()) std::printf("==== %s\n%s", s.c_str(), c->Dump(s)->c_str());
  }
}

TEST(CompileTest, InferenceAndCastPolicy) {
  auto fwd = ir::ParseGraph(kNet);
  CompileOptions o;
  o.differentiate = false;
  o.cast_policy = passes::ComputeIn(DType::kBF16, {"test.matmul"});
  auto c = Compile(*fwd, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c->Dump("joint"), *c->Dump("initial"));
  EXPECT_NE(c->Dump("optimized")->find("compute=bf16"), std::string::npos);
  Executor exec(std::move(c->program));
  auto outs = exec.Run(InputsFor(*fwd));
  ASSERT_TRUE(outs.ok());
  EXPECT_EQ((*outs)[0].ToVector(), RunGraph(*fwd, InputsFor(*fwd))[0]);
}

TEST(CompileTest, ErrorsCarryTheStage) {
  auto fwd = ir::ParseGraph(kNet);
  CompileOptions o;  // default op names "add"/"fill" are not registered in this test
  o.autodiff.fill_op = "no.such.fill";
  auto c = Compile(*fwd, o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("compile: autodiff"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace loom::compiler
