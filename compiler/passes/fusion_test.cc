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
