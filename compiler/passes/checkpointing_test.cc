#include "compiler/passes/checkpointing.h"

#include <string>

#include "compiler/testing/pass_test_util.h"
#include "compiler/testing/test_ops.h"

namespace loom::compiler::passes {
namespace {

// %a0 is block 0's parameter, %a1 block 1's; %h belongs to no block.
int BlockOf(const std::string& name) { return name == "a0" ? 0 : name == "a1" ? 1 : -1; }

// Forward: block 0 (%0, %1), block 1 (%2, %3, the loss %4), then hand-written
// backward ops. %3 (block 1) and %0 (block 0) are read by the backward: their
// blocks are recomputed before the first such read; %1 is block 1's input
// (read by the forward op %2) and stays. The clone of the loss (%7) is
// unused: DCE removes it in the compile pipeline.
TEST(ActivationCheckpointingTest, RecomputesEachBlockBeforeItsBackward) {
  testing::RegisterTestOps();
  ActivationCheckpointing pass(BlockOf);
  testing::ExpectPassOn(pass, R"IR(graph @g(%x: f32[4], %a0: f32[4] param, %a1: f32[4] param) {
  %0 = test.mul(%x, %a0) : f32[4]
  %1 = test.exp(%0) : f32[4]
  %2 = test.mul(%1, %a1) : f32[4]
  %3 = test.exp(%2) : f32[4]
  %4 = test.sum(%3) : f32[]
  %5 = test.mul(%3, %a1) : f32[4]
  %6 = test.mul(%5, %1) : f32[4]
  %7 = test.mul(%6, %0) : f32[4]
  return %4, %7
}
)IR",
                        R"IR(graph @g(%x: f32[4], %a0: f32[4] param, %a1: f32[4] param) {
  %0 = test.mul(%x, %a0) : f32[4]
  %1 = test.exp(%0) : f32[4]
  %2 = test.mul(%1, %a1) : f32[4]
  %3 = test.exp(%2) : f32[4]
  %4 = test.sum(%3) : f32[]
  %5 = test.mul(%1, %a1) : f32[4]
  %6 = test.exp(%5) : f32[4]
  %7 = test.sum(%6) : f32[]
  %8 = test.mul(%6, %a1) : f32[4]
  %9 = test.mul(%8, %1) : f32[4]
  %10 = test.mul(%x, %a0) : f32[4]
  %11 = test.exp(%10) : f32[4]
  %12 = test.mul(%9, %10) : f32[4]
  return %4, %12
}
)IR",
                        true);
}

// Ops before the first block (and after the last) are never recomputed, and a
// graph whose backward reads only kept values is left alone.
TEST(ActivationCheckpointingTest, NothingToRecomputeIsNoChange) {
  testing::RegisterTestOps();
  ActivationCheckpointing pass(BlockOf);
  const char* g = R"IR(graph @g(%x: f32[4], %h: f32[4] param, %a0: f32[4] param) {
  %0 = test.mul(%x, %h) : f32[4]
  %1 = test.mul(%0, %a0) : f32[4]
  %2 = test.sum(%1) : f32[]
  %3 = test.mul(%0, %a0) : f32[4]
  return %2, %3
}
)IR";
  testing::ExpectPassOn(pass, g, g, false);
}

// selective: the matmul outputs (%0, %2) stay alive into the backward; only
// the cheap ops (exp) are recomputed, reading the original matmul outputs.
// The same graph under blocks recomputes the matmuls too.
constexpr char kMatmulNet[] = R"IR(graph @g(%x: f32[2, 4], %a0: f32[4, 4] param, %a1: f32[4, 4] param) {
  %0 = matmul(%x, %a0) : f32[2, 4]
  %1 = exp(%0) : f32[2, 4]
  %2 = matmul(%1, %a1) : f32[2, 4]
  %3 = exp(%2) : f32[2, 4]
  %4 = sum(%3) : f32[]
  %5 = mul(%3, %2) : f32[2, 4]
  %6 = mul(%5, %0) : f32[2, 4]
  return %4, %6
}
)IR";

TEST(ActivationCheckpointingTest, SelectiveKeepsMatmulOutputs) {
  ActivationCheckpointing pass(BlockOf, /*selective=*/true);
  testing::ExpectPassOn(pass, kMatmulNet, R"IR(graph @g(%x: f32[2, 4], %a0: f32[4, 4] param, %a1: f32[4, 4] param) {
  %0 = matmul(%x, %a0) : f32[2, 4]
  %1 = exp(%0) : f32[2, 4]
  %2 = matmul(%1, %a1) : f32[2, 4]
  %3 = exp(%2) : f32[2, 4]
  %4 = sum(%3) : f32[]
  %5 = exp(%2) : f32[2, 4]
  %6 = sum(%5) : f32[]
  %7 = mul(%5, %2) : f32[2, 4]
  %8 = mul(%7, %0) : f32[2, 4]
  return %4, %8
}
)IR",
                        true);
  ActivationCheckpointing blocks(BlockOf);
  testing::ExpectPassOn(blocks, kMatmulNet, R"IR(graph @g(%x: f32[2, 4], %a0: f32[4, 4] param, %a1: f32[4, 4] param) {
  %0 = matmul(%x, %a0) : f32[2, 4]
  %1 = exp(%0) : f32[2, 4]
  %2 = matmul(%1, %a1) : f32[2, 4]
  %3 = exp(%2) : f32[2, 4]
  %4 = sum(%3) : f32[]
  %5 = matmul(%1, %a1) : f32[2, 4]
  %6 = exp(%5) : f32[2, 4]
  %7 = sum(%6) : f32[]
  %8 = mul(%6, %5) : f32[2, 4]
  %9 = matmul(%x, %a0) : f32[2, 4]
  %10 = exp(%9) : f32[2, 4]
  %11 = mul(%8, %9) : f32[2, 4]
  return %4, %11
}
)IR",
                        true);
}

}  // namespace
}  // namespace loom::compiler::passes
