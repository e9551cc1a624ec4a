// add_layernorm: add / fused adds -> layernorm as one generated launch.
#include "compiler/cuda/plan_add_layernorm.h"

#include "compiler/cuda/plan_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(AddLayerNorm, GptAddsJoinTheirNorms) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = GptJoint(2);
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    // x + wpe -> ln_1 of layer 0; the fused (c_proj bias + residual) adds ->
    // ln_2, the next layer's ln_1, and ln_f.
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNorm, "add+layernorm"), 1);
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNorm, "fused+layernorm"), 2 * 2);
    EXPECT_EQ(CountOp(*p, LaunchKind::kLayerNorm, "layernorm"), 0);
    // Left: the tied wte gradient sum, and in f32 (no GEMM epilogues) the
    // qkv and fc bias adds of each layer.
    EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "add"), bf16 ? 1 : 1 + 2 * 2);
    EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "fused"), 0);
    for (const Launch& l : p->launches) {
      if (l.kind != LaunchKind::kLayerNorm) continue;
      ASSERT_EQ(l.outputs.size(), 4u) << "sum, y, mean, rstd";
      ASSERT_EQ(l.nodes.size(), 2u);
      EXPECT_EQ(g.nodes()[l.nodes[1]].op, "layernorm");
      EXPECT_EQ(l.node, l.nodes[1]) << "attrs (eps) come from the layernorm";
      const size_t na = l.inputs.size() - 2;
      EXPECT_EQ(na, l.op == "add+layernorm" ? 2u : 3u);
      EXPECT_EQ(l.outputs[0], g.nodes()[l.nodes[0]].outputs[0]) << "the sum is stored (the next residual)";
      EXPECT_EQ(p->metas[l.outputs[0]].dtype, bf16 ? DType::kBF16 : DType::kF32);
      EXPECT_EQ(p->metas[l.inputs[na]].dtype, DType::kF32) << "weight: the f32 master";
      EXPECT_EQ(p->metas[l.outputs[2]].dtype, DType::kF32);
      // Every addend is [.., C] broadcast only over leading dims (bias [C], wpe [T, C]).
      for (size_t q = 0; q < na; ++q) EXPECT_EQ(p->metas[l.inputs[q]].shape.back(), 128);
    }
    // Off, the plan keeps one launch per node.
    PlanOptions no;
    no.add_layernorm = false;
    auto plain = PlanCuda(g, bf16, no);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(CountOp(*plain, LaunchKind::kLayerNorm, "layernorm"), 5);
    EXPECT_EQ(plain->launches.size(), p->launches.size() + 5);
  }
}

TEST(AddLayerNorm, LlamaResidualAddsJoinTheirRmsNorms) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = LlamaJoint(128, 2);
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    int fused = 0;
    for (const Launch& l : p->launches) {
      if (l.kind != LaunchKind::kLayerNorm) continue;
      ++fused;
      EXPECT_TRUE(l.attrs.GetBool("rms", false)) << l.op;
      EXPECT_EQ(g.nodes()[l.nodes.back()].op, "rmsnorm");
      ASSERT_EQ(l.outputs.size(), 3u) << "sum, y, rstd";
      const size_t na = l.inputs.size() - 1;
      EXPECT_GE(na, 2u);
      EXPECT_EQ(p->metas[l.inputs[na]].dtype, DType::kF32) << "weight: the f32 master";
      EXPECT_EQ(p->metas[l.outputs[2]].dtype, DType::kF32) << "rstd";
      EXPECT_EQ(l.outputs[0], g.nodes()[l.nodes[0]].outputs[0]) << "the sum is stored (the next residual)";
    }
    // 2 layers: the attention residual -> ffn_norm in each, the ffn residual
    // -> the next layer's attention_norm, and -> the final norm.
    EXPECT_EQ(fused, 4) << p->Describe();
    const int plain = CountOp(*p, LaunchKind::kRmsNorm);
    EXPECT_EQ(plain, 1) << "the first attention_norm reads the embedding, no add\n" << p->Describe();
    PlanOptions no;
    no.add_layernorm = false;
    auto off = PlanCuda(g, bf16, no);
    ASSERT_TRUE(off.ok());
    EXPECT_EQ(CountOp(*off, LaunchKind::kRmsNorm), 5);
    EXPECT_EQ(CountOp(*off, LaunchKind::kLayerNorm), 0);
  }
}

}  // namespace
}  // namespace loom::compiler::cuda
