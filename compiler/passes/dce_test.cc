#include "compiler/passes/dce.h"

#include "compiler/testing/pass_test_util.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectPass;

TEST(DceTest, RemovesUnusedChains) {
  ExpectPass<DeadCodeElimination>(R"IR(graph @g(%x: f32[4], %y: f32[4]) {
  %0 = test.relu(%x) : f32[4]
  %1 = test.exp(%0) : f32[4]
  %2 = test.add(%x, %y) : f32[4]
  %3 = test.mul(%2, %2) : f32[4]
  return %3
}
)IR",
                                  R"IR(graph @g(%x: f32[4], %y: f32[4]) {
  %0 = test.add(%x, %y) : f32[4]
  %1 = test.mul(%0, %0) : f32[4]
  return %1
}
)IR",
                                  true);
}

TEST(DceTest, KeepsMultiOutputNodesWithOneLiveOutput) {
  ExpectPass<DeadCodeElimination>(R"IR(graph @g(%x: f32[4]) {
  %0, %1 = test.dup(%x) : f32[4], f32[4]
  %2 = test.exp(%0) : f32[4]
  return %1
}
)IR",
                                  R"IR(graph @g(%x: f32[4]) {
  %0, %1 = test.dup(%x) : f32[4], f32[4]
  return %1
}
)IR",
                                  true);
}

TEST(DceTest, NoChangeReported) {
  constexpr char kLive[] = R"IR(graph @g(%x: f32[4], %unused: f32[2] param) {
  %0 = test.exp(%x) : f32[4]
  return %0, %x
}
)IR";
  ExpectPass<DeadCodeElimination>(kLive, kLive, false);
}

}  // namespace
}  // namespace loom::compiler::passes
