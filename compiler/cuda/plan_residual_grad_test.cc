// residual_grad: layernorm_backward / rmsnorm_backward -> add(other, dx) as one launch writing
// the sum.
#include "compiler/cuda/plan_residual_grad.h"

#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(ResidualGrad, FoldsTheResidualAddsOfGpt) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = GptJoint(2);
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    // Every layer norm's but ln_f's (its dx has no add after it).
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNormBackward, "layernorm_backward+add"), 2 * 2);
    for (const Launch& l : p->launches)
      if (l.op == "layernorm_backward+add") {
        EXPECT_EQ(l.inputs.size(), 6u) << "dy, x, weight, mean, rstd, then dresidual";
        EXPECT_EQ(l.nodes.size(), 2u);
        EXPECT_EQ(l.outputs[0], g.nodes()[l.nodes[1]].outputs[0]) << "the sum is written";
      }
    PlanOptions o;
    o.fold_residual_grad = false;
    auto off = PlanCuda(g, bf16, o);
    ASSERT_TRUE(off.ok()) << off.status();
    EXPECT_EQ(CountOp(*off, LaunchKind::kLayerNormBackward, "layernorm_backward+add"), 0);
    EXPECT_EQ(off->launches.size(), p->launches.size() + 2 * 2);
  }
}

TEST(ResidualGrad, FoldsTheResidualAddsOfLlama) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = LlamaJoint(128, 2);
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    const int folded = CountOp(*p, LaunchKind::kRmsNormBackward, "rmsnorm_backward+add");
    // Every norm of the 2 layers (their dx joins the residual stream's gradient);
    // not the final norm's, whose dx has no add after it.
    EXPECT_EQ(folded, 2 * 2) << p->Describe();
    for (const Launch& l : p->launches)
      if (l.op == "rmsnorm_backward+add") {
        EXPECT_EQ(l.inputs.size(), 5u) << "dy, x, weight, rstd, then dresidual";
        EXPECT_EQ(l.outputs[0], g.nodes()[l.nodes[1]].outputs[0]) << "the sum is written";
        EXPECT_EQ(p->metas[l.inputs[4]].dtype, p->metas[l.outputs[0]].dtype);
      }
    PlanOptions o;
    o.fold_residual_grad = false;
    auto off = PlanCuda(g, bf16, o);
    ASSERT_TRUE(off.ok()) << off.status();
    EXPECT_EQ(CountOp(*off, LaunchKind::kRmsNormBackward, "rmsnorm_backward+add"), 0);
    EXPECT_EQ(off->launches.size(), p->launches.size() + folded);
  }
}

// The add must come after both operands exist: an `other` computed after the
// layernorm_backward is no dresidual.
TEST(ResidualGrad, OtherMustBeAvailable) {
  auto g =
      ir::ParseGraph(R"IR(graph @g(%dy: f32[4, 8], %x: f32[4, 8], %w: f32[8], %m: f32[4], %r: f32[4], %z: f32[4, 8]) {
  %0, %1, %2 = layernorm_backward(%dy, %x, %w, %m, %r) : f32[4, 8], f32[8], f32[8]
  %3 = exp(%z) : f32[4, 8]
  %4 = add(%0, %3) : f32[4, 8]
  return %4, %1, %2
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNormBackward, "layernorm_backward"), 1);
  EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "add"), 1);
  auto g2 =
      ir::ParseGraph(R"IR(graph @g(%dy: f32[4, 8], %x: f32[4, 8], %w: f32[8], %m: f32[4], %r: f32[4], %z: f32[4, 8]) {
  %0, %1, %2 = layernorm_backward(%dy, %x, %w, %m, %r) : f32[4, 8], f32[8], f32[8]
  %3 = add(%0, %z) : f32[4, 8]
  return %3, %1, %2
}
)IR");
  ASSERT_TRUE(g2.ok()) << g2.status();
  auto p2 = PlanCuda(*g2, false);
  ASSERT_TRUE(p2.ok()) << p2.status();
  ASSERT_EQ(p2->launches.size(), 1u) << p2->Describe();
  EXPECT_EQ(p2->launches[0].op, "layernorm_backward+add");
}

}  // namespace
}  // namespace loom::compiler::cuda
