// gemm_accumulate: a sum of plain GEMM products as GEMMs adding into one buffer.
#include "compiler/cuda/plan_gemm_accumulate.h"

#include <string>
#include <vector>

#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(GemmAccumulate, TwoProductsShareOneBuffer) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[8, 4], %y: f32[8, 6], %w: f32[4, 5], %v: f32[6, 5]) {
  %0 = matmul(%x, %w) : f32[8, 5]
  %1 = matmul(%y, %v) : f32[8, 5]
  %2 = add(%0, %1) : f32[8, 5]
  return %2
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  for (bool bf16 : {false, true}) {
    auto p = PlanCuda(*g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<const Launch*> gemms;
    for (const Launch& l : p->launches) {
      EXPECT_NE(l.kind, LaunchKind::kPointwise) << "the add is gone\n" << p->Describe();
      if (l.kind == LaunchKind::kGemm) gemms.push_back(&l);
    }
    ASSERT_EQ(gemms.size(), 2u) << p->Describe();
    EXPECT_FALSE(gemms[0]->gemm.accumulate) << "the first GEMM stores its product";
    EXPECT_TRUE(gemms[1]->gemm.accumulate) << "the second adds into it";
    EXPECT_EQ(gemms[0]->outputs, std::vector<int>{6});
    EXPECT_EQ(gemms[1]->outputs, std::vector<int>{6});
    EXPECT_EQ(gemms[1]->inputs.back(), 6) << "the sum is read by the accumulating GEMM";
    EXPECT_EQ(gemms[1]->nodes, (std::vector<int>{1, 2})) << "the add is covered by the last GEMM";
    EXPECT_EQ(p->root[4], -1) << "the products are never materialised";
    EXPECT_EQ(p->root[5], -1);
    EXPECT_EQ(ArenaProblems(*g, *p), std::vector<std::string>{});
    PlanOptions off;
    off.accumulate_gemms = false;
    auto q = PlanCuda(*g, bf16, off);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(CountOp(*q, LaunchKind::kPointwise, "add"), 1);
  }
}

TEST(GemmAccumulate, LeavesSumsItCannotFold) {
  // A product read elsewhere too, and a broadcast operand: no accumulation.
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[8, 4], %w: f32[4, 5], %v: f32[4, 5], %b: f32[5]) {
  %0 = matmul(%x, %w) : f32[8, 5]
  %1 = matmul(%x, %v) : f32[8, 5]
  %2 = add(%0, %1) : f32[8, 5]
  %3 = exp(%0) : f32[8, 5]
  %4 = matmul(%x, %v) : f32[8, 5]
  %5 = add(%4, %b) : f32[8, 5]
  return %2, %3, %5
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_TRUE(p.ok()) << p.status();
  for (const Launch& l : p->launches) EXPECT_FALSE(l.gemm.accumulate) << p->Describe();
  // Both sums stay adds (an f32 plan folds no bias into the GEMM either).
  EXPECT_EQ(CountOp(*p, LaunchKind::kPointwise, "add"), 2) << p->Describe();
}

TEST(GemmAccumulate, LlamaInputGradientsAccumulate) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = LlamaJoint(128, 2);
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    int acc = 0;
    for (const Launch& l : p->launches) acc += l.kind == LaunchKind::kGemm && l.gemm.accumulate;
    // Per layer: the gate and up projections' input gradients (1 accumulating
    // GEMM), and q, k and v's (2).
    EXPECT_EQ(acc, 2 * 3) << p->Describe();
    EXPECT_EQ(ArenaProblems(g, *p), std::vector<std::string>{});
  }
}

}  // namespace
}  // namespace loom::compiler::cuda
