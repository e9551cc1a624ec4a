#include "compiler/passes/fusion.h"

#include "compiler/testing/pass_test_util.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectPass;

TEST(FusionTest, FusesAChainWithBroadcastInputs) {
  ExpectPass<ElementwiseFusion>(R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 8], %b: f32[8]) {
  %0 = test.matmul(%x, %w) : f32[4, 8]
  %1 = test.add(%0, %b) : f32[4, 8]
  %2 = test.relu(%1) : f32[4, 8]
  %3 = test.scale(%2) {s=0.5} : f32[4, 8]
  %4 = test.sum(%3) : f32[]
  return %4
}
)IR",
                                R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 8], %b: f32[8]) {
  %0 = test.matmul(%x, %w) : f32[4, 8]
  %1 = fused(%0, %b) : f32[4, 8] graph @fused_0(%x0: f32[4, 8], %x1: f32[8]) {
    %0 = test.add(%x0, %x1) : f32[4, 8]
    %1 = test.relu(%0) : f32[4, 8]
    %2 = test.scale(%1) {s=0.5} : f32[4, 8]
    return %2
  }
  %2 = test.sum(%1) : f32[]
  return %2
}
)IR",
                                true);
}

TEST(FusionTest, StopsAtValuesUsedOutsideTheGroup) {
  // %1 feeds both %2 and the graph output, so it ends a group; %2..%3 fuse,
  // and the tree %4 = mul(exp(x), relu(x)) fuses into one group.
  ExpectPass<ElementwiseFusion>(R"IR(graph @g(%x: f32[3, 5]) {
  %0 = test.exp(%x) : f32[3, 5]
  %1 = test.relu(%0) : f32[3, 5]
  %2 = test.scale(%1) {s=2} : f32[3, 5]
  %3 = test.exp(%2) : f32[3, 5]
  %4 = test.exp(%x) : f32[3, 5]
  %5 = test.relu(%x) : f32[3, 5]
  %6 = test.mul(%4, %5) : f32[3, 5]
  return %3, %1, %6
}
)IR",
                                R"IR(graph @g(%x: f32[3, 5]) {
  %0 = fused(%x) : f32[3, 5] graph @fused_0(%x0: f32[3, 5]) {
    %0 = test.exp(%x0) : f32[3, 5]
    %1 = test.relu(%0) : f32[3, 5]
    return %1
  }
  %1 = fused(%0) : f32[3, 5] graph @fused_1(%x0: f32[3, 5]) {
    %0 = test.scale(%x0) {s=2} : f32[3, 5]
    %1 = test.exp(%0) : f32[3, 5]
    return %1
  }
  %2 = fused(%x) : f32[3, 5] graph @fused_2(%x0: f32[3, 5]) {
    %0 = test.exp(%x0) : f32[3, 5]
    %1 = test.relu(%x0) : f32[3, 5]
    %2 = test.mul(%0, %1) : f32[3, 5]
    return %2
  }
  return %1, %0, %2
}
)IR",
                                true);
}

// A unary op read by several fusible ops, whose input is kept anyway, is
// recomputed in each reader's group instead of stored (SwiGLU's silu(g):
// the forward multiply and the backward's both read it; g is read again).
TEST(FusionTest, RecomputesAUnaryOpInEachReadersGroup) {
  ExpectPass<ElementwiseFusion>(R"IR(graph @g(%g: f32[4, 8], %u: f32[4, 8], %d: f32[4, 8]) {
  %0 = test.exp(%g) : f32[4, 8]
  %1 = test.mul(%0, %u) : f32[4, 8]
  %2 = test.mul(%d, %0) : f32[4, 8]
  %3 = test.mul(%d, %g) : f32[4, 8]
  return %1, %2, %3
}
)IR",
                                R"IR(graph @g(%g: f32[4, 8], %u: f32[4, 8], %d: f32[4, 8]) {
  %0 = fused(%g, %u) : f32[4, 8] graph @fused_0(%x0: f32[4, 8], %x1: f32[4, 8]) {
    %0 = test.exp(%x0) : f32[4, 8]
    %1 = test.mul(%0, %x1) : f32[4, 8]
    return %1
  }
  %1 = fused(%g, %d) : f32[4, 8] graph @fused_1(%x0: f32[4, 8], %x1: f32[4, 8]) {
    %0 = test.exp(%x0) : f32[4, 8]
    %1 = test.mul(%x1, %0) : f32[4, 8]
    return %1
  }
  %2 = test.mul(%d, %g) : f32[4, 8]
  return %0, %1, %2
}
)IR",
                                true);
}

// Not when a reader cannot take it in (a matmul), when it is a graph
// output, or when its input would be kept only for the copies.
TEST(FusionTest, KeepsAUnaryOpOtherwise) {
  constexpr char kMatmulReads[] = R"IR(graph @g(%g: f32[8, 8], %u: f32[8, 8]) {
  %0 = test.exp(%g) : f32[8, 8]
  %1 = test.matmul(%0, %u) : f32[8, 8]
  %2 = test.scale(%0) {s=2} : f32[8, 8]
  %3 = test.relu(%g) : f32[8, 8]
  return %1, %2, %3
}
)IR";
  ExpectPass<ElementwiseFusion>(kMatmulReads, kMatmulReads, false);
  constexpr char kOnlyInput[] = R"IR(graph @g(%w: f32[8, 8]) {
  %0 = test.matmul(%w, %w) : f32[8, 8]
  %1 = test.exp(%0) : f32[8, 8]
  %2 = test.scale(%1) {s=2} : f32[8, 8]
  %3 = test.relu(%1) : f32[8, 8]
  %4 = test.add(%2, %3) : f32[8, 8]
  return %4
}
)IR";
  // exp's input %0 is read by exp alone: exp stays one node, stored, and
  // its two readers fuse with the add as usual.
  ExpectPass<ElementwiseFusion>(kOnlyInput, R"IR(graph @g(%w: f32[8, 8]) {
  %0 = test.matmul(%w, %w) : f32[8, 8]
  %1 = test.exp(%0) : f32[8, 8]
  %2 = fused(%1) : f32[8, 8] graph @fused_0(%x0: f32[8, 8]) {
    %0 = test.scale(%x0) {s=2} : f32[8, 8]
    %1 = test.relu(%x0) : f32[8, 8]
    %2 = test.add(%0, %1) : f32[8, 8]
    return %2
  }
  return %2
}
)IR",
                                true);
}

TEST(FusionTest, LeavesSingletonsAndNonElementwiseOpsAlone) {
  constexpr char kNothing[] = R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 8], %b: f32[1]) {
  %0 = test.relu(%x) : f32[4, 8]
  %1 = test.matmul(%0, %w) : f32[4, 8]
  %2, %3 = test.dup(%1) : f32[4, 8], f32[4, 8]
  %4 = test.exp(%b) : f32[1]
  %5 = test.add(%2, %4) : f32[4, 8]
  return %5, %3
}
)IR";
  ExpectPass<ElementwiseFusion>(kNothing, kNothing, false);
}

}  // namespace
}  // namespace loom::compiler::passes
