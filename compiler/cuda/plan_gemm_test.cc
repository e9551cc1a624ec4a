// gemm_epilogues and the GEMM launches: the epilogue and weight-gradient
// fusions on the gpt joint graph and on small IR graphs.
#include "compiler/cuda/plan_gemm.h"

#include <string>

#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(GemmEpilogues, FusionsOnGpt) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = GptJoint(2);
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    // bf16, per layer: qkv matmul+bias (slices consume it), fc
    // matmul+bias+gelu, and dgelu in the backward (c_proj's bias goes with
    // the residual add). f32 keeps every GEMM plain: its epilogues are the
    // less accurate ones.
    EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+add"), bf16 ? 2 : 0);
    EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+add+gelu"), bf16 ? 2 : 0);
    EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+gelu_backward"), bf16 ? 2 : 0) << "dgelu in the GEMM epilogue";
    int gelu_outside = 0, dgelu_outside = 0;
    for (const Launch& l : p->launches)
      for (int n : l.nodes) {
        gelu_outside += l.kind != LaunchKind::kGemm && g.nodes()[n].op == "gelu";
        dgelu_outside += l.kind != LaunchKind::kGemm && g.nodes()[n].op == "gelu_backward";
      }
    EXPECT_EQ(gelu_outside, bf16 ? 0 : 2) << "f32: gelu in a kernel of its own";
    EXPECT_EQ(dgelu_outside, bf16 ? 0 : 2) << "f32: gelu_backward in a kernel of its own";
    // Weight gradients: 4 per layer + the tied wte (the simplify pass already
    // turns matmul+sum_to into one 2-D matmul with K = batch * T).
    int wgrad = 0;
    for (const Launch& l : p->launches)
      wgrad += l.kind == LaunchKind::kGemm && (l.gemm.weight_grad || (l.gemm.trans_a && l.gemm.k == 8 * 64));
    EXPECT_EQ(wgrad, 9);
    for (const Launch& l : p->launches) {
      if (l.kind != LaunchKind::kGemm) continue;
      EXPECT_EQ(l.gemm.batch, 1) << l.op;
      EXPECT_EQ(l.gemm.ab_dtype, bf16 ? DType::kBF16 : DType::kF32);
      if (l.gemm.weight_grad || l.gemm.trans_a) {
        EXPECT_EQ(l.gemm.d_dtype, DType::kF32) << "parameter gradients are f32";
        EXPECT_EQ(l.gemm.k, 8 * 64);
      }
      if (l.op == "matmul+add+gelu") {
        EXPECT_EQ(l.gemm.epilogue, GemmEpilogue::kBiasGeluAux);
        EXPECT_EQ(l.outputs.size(), 2u) << "D = gelu, aux = the pre-activation";
      }
      if (l.op == "matmul+gelu_backward") {
        EXPECT_EQ(l.gemm.epilogue, GemmEpilogue::kDGelu);
      }
      for (int v : l.inputs) EXPECT_EQ(p->metas[v].dtype, l.gemm.ab_dtype) << l.op;
    }
  }
}

// The claims alone: the folded nodes are covered by the matmul, and the
// matmul's own output is never materialised.
// PlanOptions::gemm_epilogues off (CudaOptions::gemm_epilogues false): every
// GEMM plain, and the bias add, GELU and its backward in launches of their own.
TEST(GemmEpilogues, OffLeavesEveryGemmPlain) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = GptJoint(2);
    PlanOptions o;
    o.gemm_epilogues = false;
    auto p = PlanCuda(g, bf16, o);
    ASSERT_TRUE(p.ok()) << p.status();
    int gelu = 0, gelu_backward = 0;
    for (const Launch& l : p->launches) {
      if (l.kind == LaunchKind::kGemm) {
        EXPECT_EQ(l.gemm.epilogue, GemmEpilogue::kNone) << l.op;
        continue;
      }
      for (int n : l.nodes) {
        gelu += g.nodes()[n].op == "gelu";
        gelu_backward += g.nodes()[n].op == "gelu_backward";
      }
    }
    EXPECT_EQ(gelu, 2) << "one per layer, outside the GEMMs";
    EXPECT_EQ(gelu_backward, 2);
    auto on = PlanCuda(g, bf16);
    ASSERT_TRUE(on.ok()) << on.status();
    if (bf16)
      EXPECT_GT(p->launches.size(), on->launches.size()) << "the fusions removed launches";
    else
      EXPECT_EQ(p->launches.size(), on->launches.size()) << "f32 plans take no epilogue either way";
  }
}

TEST(GemmEpilogues, ClaimsCoverTheFoldedNodes) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 16] param, %b: f32[16] param) {
  %0 = matmul(%x, %w) : f32[4, 16]
  %1 = add(%0, %b) : f32[4, 16]
  %2 = gelu(%1) {approximate="tanh"} : f32[4, 16]
  return %2
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  PlanOptions o;
  plan_internal::PlanState s(*g, /*bf16=*/true, o);
  auto passes = plan_internal::PlanPipeline(o);
  ASSERT_EQ(passes[0]->name(), "storage_dtypes");
  ASSERT_EQ(passes[1]->name(), "gemm_epilogues");
  ASSERT_TRUE(passes[0]->Run(s).ok());
  auto changed = passes[1]->Run(s);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(s.gemm.count(0), 1u);
  EXPECT_EQ(s.gemm.at(0).op, "matmul+add+gelu");
  EXPECT_EQ(s.covered_by[1], 0);
  EXPECT_EQ(s.covered_by[2], 0);
  EXPECT_FALSE(s.materialized(g->nodes()[0].outputs[0]));
  EXPECT_TRUE(s.materialized(g->nodes()[1].outputs[0])) << "aux: the pre-activation is stored";
  // N = 16 is a multiple of 8; with N = 12 the GELU stays its own launch.
  auto odd = ir::ParseGraph(R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 12] param, %b: f32[12] param) {
  %0 = matmul(%x, %w) : f32[4, 12]
  %1 = add(%0, %b) : f32[4, 12]
  %2 = gelu(%1) {approximate="tanh"} : f32[4, 12]
  return %2
}
)IR");
  ASSERT_TRUE(odd.ok()) << odd.status();
  auto p = PlanCuda(*odd, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kGemm, "matmul+add"), 1);
  EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "gelu"), 1);
  // An f32 plan takes no epilogue: the matmul, bias add and GELU stay apart.
  auto f32 = PlanCuda(*g, false);
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(CountOp(*f32, LaunchKind::kGemm, "matmul"), 1);
  EXPECT_EQ(CountOp(*f32, LaunchKind::kGemm, "matmul+add+gelu"), 0);
}

TEST(GemmEpilogues, MixedDTypeOperandsGetCastsAndShadows) {
  // An f32 graph input feeding a matmul under bf16 is cast (it is not a
  // param); a param gets a bf16 shadow instead.
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 16] param) {
  %0 = matmul(%x, %w) : f32[4, 16]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "cast"), 1);
  EXPECT_GE(p->shadow[1], 0);
  EXPECT_EQ(p->launches.back().kind, LaunchKind::kGemm);
  EXPECT_EQ(p->launches.back().inputs[1], p->shadow[1]);
}

TEST(GemmEpilogues, UnsupportedShapesAreNamed) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[2, 3, 4, 8], %w: f32[3, 8, 16]) {
  %0 = matmul(%x, %w) : f32[2, 3, 4, 16]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(p.status().message()).find("matmul"), std::string::npos) << p.status();
  EXPECT_NE(std::string(p.status().message()).find("operand shapes [2, 3, 4, 8] x [3, 8, 16]"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace loom::compiler::cuda
