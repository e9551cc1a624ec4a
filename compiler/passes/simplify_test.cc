#include "compiler/passes/simplify.h"

#include <gtest/gtest.h>

#include "base/rng.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "compiler/passes/dce.h"

namespace loom::compiler::passes {
namespace {

int Count(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}

// Runs `g` on seeded random inputs and returns its outputs.
std::vector<Tensor> RunOnRandom(const ir::Graph& g) {
  std::vector<Tensor> in;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const auto& m = g.meta(g.inputs()[k].value);
    Tensor t = Tensor::Zeros(m.shape, m.dtype);
    Philox rng(42, k);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng.Normal(static_cast<uint64_t>(i)));
    in.push_back(t);
  }
  auto exec = Executor::Create(g);
  EXPECT_TRUE(exec.ok()) << exec.status();
  auto out = exec->Run(in);
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<Tensor> copies;
  for (const Tensor& t : *out) copies.push_back(t.Clone());
  return copies;
}

// Simplifies (then DCE) a parsed graph; checks outputs are unchanged.
ir::Graph SimplifyAndCompare(const char* text, bool expect_changed) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  ir::Graph s = *g;
  AlgebraicSimplification pass;
  auto changed = pass.Run(s);
  EXPECT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, expect_changed);
  DeadCodeElimination dce;
  EXPECT_TRUE(dce.Run(s).ok());
  std::vector<Tensor> want = RunOnRandom(*g), got = RunOnRandom(s);
  EXPECT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    EXPECT_EQ(want[i].shape(), got[i].shape());
    EXPECT_LT(RelativeError(got[i], want[i]), 1e-6) << "output " << i;
  }
  return s;
}

TEST(SimplifyTest, BatchedWeightGradientBecomesOneGemm) {
  ir::Graph s = SimplifyAndCompare(R"IR(graph @g(%x: f32[3, 5, 4], %dy: f32[3, 5, 6]) {
  %0 = matmul(%x, %dy) {trans_a=true, trans_b=false} : f32[3, 4, 6]
  %1 = sum_to(%0) {shape=[4, 6]} : f32[4, 6]
  return %1
}
)IR",
                               true);
  EXPECT_EQ(Count(s, "sum_to"), 0);
  ASSERT_EQ(Count(s, "matmul"), 1);
  for (const ir::Node& n : s.nodes())
    if (n.op == "matmul") {
      EXPECT_EQ(s.meta(n.inputs[0]).shape, (Shape{15, 4}));
      EXPECT_EQ(s.meta(n.inputs[1]).shape, (Shape{15, 6}));
    }
}

TEST(SimplifyTest, BatchedProductLeftAloneWhenItIsNotAReshape) {
  // trans_b: stacking along the contraction dim would need a transpose.
  SimplifyAndCompare(R"IR(graph @g(%x: f32[3, 5, 4], %dy: f32[3, 6, 5]) {
  %0 = matmul(%x, %dy) {trans_a=true, trans_b=true} : f32[3, 4, 6]
  %1 = sum_to(%0) {shape=[4, 6]} : f32[4, 6]
  return %1
}
)IR",
                     false);
  // The batched product is also an output: it must stay.
  SimplifyAndCompare(R"IR(graph @g(%x: f32[3, 5, 4], %dy: f32[3, 5, 6]) {
  %0 = matmul(%x, %dy) {trans_a=true, trans_b=false} : f32[3, 4, 6]
  %1 = sum_to(%0) {shape=[4, 6]} : f32[4, 6]
  return %1, %0
}
)IR",
                     false);
}

TEST(SimplifyTest, SliceGradientsThatTileBecomeConcat) {
  ir::Graph s = SimplifyAndCompare(R"IR(graph @g(%a: f32[2, 3, 4], %b: f32[2, 3, 4], %c: f32[2, 3, 4]) {
  %0 = slice_backward(%a) {axis=2, full_len=12, start=8} : f32[2, 3, 12]
  %1 = slice_backward(%b) {axis=2, full_len=12, start=4} : f32[2, 3, 12]
  %2 = add(%0, %1) : f32[2, 3, 12]
  %3 = slice_backward(%c) {axis=2, full_len=12, start=0} : f32[2, 3, 12]
  %4 = add(%2, %3) : f32[2, 3, 12]
  return %4
}
)IR",
                               true);
  EXPECT_EQ(Count(s, "slice_backward"), 0);
  EXPECT_EQ(Count(s, "add"), 0);
  EXPECT_EQ(Count(s, "concat"), 1);
}

TEST(SimplifyTest, SliceGradientsWithAGapOrSharedSumStay) {
  // [0,4) and [8,12): the middle is zeros, not a concat.
  SimplifyAndCompare(R"IR(graph @g(%a: f32[2, 4], %b: f32[2, 4]) {
  %0 = slice_backward(%a) {axis=1, full_len=12, start=0} : f32[2, 12]
  %1 = slice_backward(%b) {axis=1, full_len=12, start=8} : f32[2, 12]
  %2 = add(%0, %1) : f32[2, 12]
  return %2
}
)IR",
                     false);
  // The partial sum %2 is used twice.
  SimplifyAndCompare(R"IR(graph @g(%a: f32[2, 4], %b: f32[2, 4], %c: f32[2, 4]) {
  %0 = slice_backward(%a) {axis=1, full_len=12, start=0} : f32[2, 12]
  %1 = slice_backward(%b) {axis=1, full_len=12, start=4} : f32[2, 12]
  %2 = add(%0, %1) : f32[2, 12]
  %3 = slice_backward(%c) {axis=1, full_len=12, start=8} : f32[2, 12]
  %4 = add(%2, %3) : f32[2, 12]
  return %4, %2
}
)IR",
                     false);
}

// The rewrites take the replaced node's place: nodes after it stay after it
// (a collective scheduled right after a gradient's producer, for one), so the
// pass keeps the schedule of the graph it is given.
TEST(SimplifyTest, RewritesKeepTheSchedule) {
  ir::Graph s =
      SimplifyAndCompare(R"IR(graph @g(%x: f32[3, 5, 4], %dy: f32[3, 5, 6], %a: f32[2, 4], %b: f32[2, 4], %z: f32[2]) {
  %0 = matmul(%x, %dy) {trans_a=true, trans_b=false} : f32[3, 4, 6]
  %1 = sum_to(%0) {shape=[4, 6]} : f32[4, 6]
  %2 = neg(%1) : f32[4, 6]
  %3 = slice_backward(%a) {axis=1, full_len=8, start=0} : f32[2, 8]
  %4 = slice_backward(%b) {axis=1, full_len=8, start=4} : f32[2, 8]
  %5 = add(%3, %4) : f32[2, 8]
  %6 = neg(%5) : f32[2, 8]
  %7 = add(%z, %z) : f32[2]
  return %2, %6, %7
}
)IR",
                         true);
  EXPECT_EQ(ir::PrintGraph(s),
            R"IR(graph @g(%x: f32[3, 5, 4], %dy: f32[3, 5, 6], %a: f32[2, 4], %b: f32[2, 4], %z: f32[2]) {
  %0 = reshape(%x) {shape=[15, 4]} : f32[15, 4]
  %1 = reshape(%dy) {shape=[15, 6]} : f32[15, 6]
  %2 = matmul(%0, %1) {trans_a=true, trans_b=false} : f32[4, 6]
  %3 = neg(%2) : f32[4, 6]
  %4 = concat(%a, %b) {axis=1} : f32[2, 8]
  %5 = neg(%4) : f32[2, 8]
  %6 = add(%z, %z) : f32[2]
  return %3, %5, %6
}
)IR");
}

TEST(SimplifyTest, SteppedSliceGradientsStay) {
  // Even and odd positions tile [0, 8) but interleave: not a concat.
  SimplifyAndCompare(R"IR(graph @g(%a: f32[2, 4], %b: f32[2, 4]) {
  %0 = slice_backward(%a) {axis=1, full_len=8, start=0, step=2} : f32[2, 8]
  %1 = slice_backward(%b) {axis=1, full_len=8, start=1, step=2} : f32[2, 8]
  %2 = add(%0, %1) : f32[2, 8]
  return %2
}
)IR",
                     false);
  // Starts 0 and 4 with lengths 4 look like a tiling, but the first leaf
  // writes 0, 2, 4, 6 (a concat would put it at 0..3).
  SimplifyAndCompare(R"IR(graph @g(%a: f32[2, 4], %b: f32[2, 4]) {
  %0 = slice_backward(%a) {axis=1, full_len=8, start=0, step=2} : f32[2, 8]
  %1 = slice_backward(%b) {axis=1, full_len=8, start=4} : f32[2, 8]
  %2 = add(%0, %1) : f32[2, 8]
  return %2
}
)IR",
                     false);
}

}  // namespace
}  // namespace loom::compiler::passes
