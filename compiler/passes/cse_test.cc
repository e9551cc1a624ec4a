#include "compiler/passes/cse.h"

#include "compiler/testing/pass_test_util.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectPass;

TEST(CseTest, MergesIdenticalNodesTransitively) {
  ExpectPass<CommonSubexpressionElimination>(R"IR(graph @g(%x: f32[4], %y: f32[4]) {
  %0 = test.exp(%x) : f32[4]
  %1 = test.exp(%x) : f32[4]
  %2 = test.add(%0, %y) : f32[4]
  %3 = test.add(%1, %y) : f32[4]
  %4 = test.mul(%2, %3) : f32[4]
  return %4, %3
}
)IR",
                                             R"IR(graph @g(%x: f32[4], %y: f32[4]) {
  %0 = test.exp(%x) : f32[4]
  %1 = test.add(%0, %y) : f32[4]
  %2 = test.mul(%1, %1) : f32[4]
  return %2, %1
}
)IR",
                                             true);
}

TEST(CseTest, DistinguishesAttrsOperandOrderAndComputeDtype) {
  constexpr char kDistinct[] = R"IR(graph @g(%x: f32[4], %y: f32[4]) {
  %0 = test.scale(%x) {s=2} : f32[4]
  %1 = test.scale(%x) {s=3} : f32[4]
  %2 = test.add(%x, %y) : f32[4]
  %3 = test.add(%y, %x) : f32[4]
  %4 = test.exp(%x) : f32[4]
  %5 = test.exp(%x) compute=bf16 : f32[4]
  return %0, %1, %2, %3, %4, %5
}
)IR";
  ExpectPass<CommonSubexpressionElimination>(kDistinct, kDistinct, false);
}

TEST(CseTest, MergesMultiOutputNodesAndConstants) {
  ExpectPass<CommonSubexpressionElimination>(R"IR(graph @g(%x: f32[4]) {
  %0, %1 = test.dup(%x) : f32[4], f32[4]
  %2, %3 = test.dup(%x) : f32[4], f32[4]
  %4 = test.fill() {shape=[4], value=1.0} : f32[4]
  %5 = test.fill() {shape=[4], value=1.0} : f32[4]
  %6 = test.add(%1, %3) : f32[4]
  %7 = test.add(%4, %5) : f32[4]
  return %6, %7, %2
}
)IR",
                                             R"IR(graph @g(%x: f32[4]) {
  %0, %1 = test.dup(%x) : f32[4], f32[4]
  %2 = test.fill() {shape=[4], value=1.0} : f32[4]
  %3 = test.add(%1, %1) : f32[4]
  %4 = test.add(%2, %2) : f32[4]
  return %3, %4, %0
}
)IR",
                                             true);
}

}  // namespace
}  // namespace loom::compiler::passes
