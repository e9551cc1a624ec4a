#include "compiler/passes/recover_linear.h"

#include "compiler/testing/recover_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectRecovered;
using testing::ExpectUnchanged;

TEST(RecoverLinearTest, TransposedWeightAndBiasInFront) {  // nn.Linear as torch 1.13 exports it
  recover::MatchLog log;
  ExpectRecovered(RecoverLinear(&log), R"IR(graph @g(%x: f32[2, 3, 4], %w: f32[5, 4] param, %b: f32[5] param) {
  %0 = permute(%w) {dims=[1, 0]} : f32[4, 5]
  %1 = matmul(%x, %0) : f32[2, 3, 5]
  %2 = add(%b, %1) : f32[2, 3, 5]
  return %2
}
)IR",
                  R"IR(graph @g(%x: f32[2, 3, 4], %w: f32[5, 4] param, %b: f32[5] param) {
  %0 = matmul(%x, %w) {trans_b=true} : f32[2, 3, 5]
  %1 = add(%0, %b) : f32[2, 3, 5]
  return %1
}
)IR");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "linear: x @ %w^T + %b -> matmul{trans_b=true} + add");
}

TEST(RecoverLinearTest, TiedHeadKeepsThePermuteOthersRead) {
  ExpectRecovered(RecoverLinear(), R"IR(graph @g(%x: f32[3, 4], %wte: f32[6, 4] param) {
  %0 = permute(%wte) {dims=[1, 0]} : f32[4, 6]
  %1 = matmul(%x, %0) : f32[3, 6]
  return %1, %0
}
)IR",
                  R"IR(graph @g(%x: f32[3, 4], %wte: f32[6, 4] param) {
  %0 = permute(%wte) {dims=[1, 0]} : f32[4, 6]
  %1 = matmul(%x, %wte) {trans_b=true} : f32[3, 6]
  return %1, %0
}
)IR");
}

TEST(RecoverLinearTest, GemmFlagsDropped) {  // Gemm(transB=1) imports with trans_a=false
  ExpectRecovered(RecoverLinear(), R"IR(graph @g(%x: f32[3, 4], %w: f32[5, 4] param, %b: f32[5] param) {
  %0 = matmul(%x, %w) {trans_a=false, trans_b=true} : f32[3, 5]
  %1 = add(%0, %b) : f32[3, 5]
  return %1
}
)IR",
                  R"IR(graph @g(%x: f32[3, 4], %w: f32[5, 4] param, %b: f32[5] param) {
  %0 = matmul(%x, %w) {trans_b=true} : f32[3, 5]
  %1 = add(%0, %b) : f32[3, 5]
  return %1
}
)IR");
}

// Near misses: the graph must come back unchanged.
TEST(RecoverLinearTest, NearMisses) {
  // A permute that is not a transpose of the last two dims.
  ExpectUnchanged(RecoverLinear(), R"IR(graph @g(%x: f32[3, 2, 4], %w: f32[4, 3, 5]) {
  %0 = permute(%w) {dims=[1, 0, 2]} : f32[3, 4, 5]
  %1 = matmul(%x, %0) : f32[3, 2, 5]
  return %1
}
)IR");
  // A batched transpose (attention's k^T) is not a weight.
  ExpectUnchanged(RecoverLinear(), R"IR(graph @g(%q: f32[2, 3, 5, 4], %k: f32[2, 3, 5, 4]) {
  %0 = permute(%k) {dims=[0, 1, 3, 2]} : f32[2, 3, 4, 5]
  %1 = matmul(%q, %0) : f32[2, 3, 5, 5]
  return %1
}
)IR");
  // Already transposed: permute then trans_b would be a double transpose.
  ExpectUnchanged(RecoverLinear(), R"IR(graph @g(%x: f32[3, 4], %w: f32[4, 5]) {
  %0 = permute(%w) {dims=[1, 0]} : f32[5, 4]
  %1 = matmul(%x, %0) {trans_b=true} : f32[3, 5]
  return %1
}
)IR");
  // A bias-shaped add whose product is also read elsewhere.
  ExpectUnchanged(RecoverLinear(), R"IR(graph @g(%x: f32[3, 4], %w: f32[4, 5], %b: f32[5]) {
  %0 = matmul(%x, %w) : f32[3, 5]
  %1 = add(%b, %0) : f32[3, 5]
  return %1, %0
}
)IR");
  // A full-size addend in front is not a bias.
  ExpectUnchanged(RecoverLinear(), R"IR(graph @g(%x: f32[3, 4], %w: f32[4, 5], %r: f32[3, 5]) {
  %0 = matmul(%x, %w) : f32[3, 5]
  %1 = add(%r, %0) : f32[3, 5]
  return %1
}
)IR");
}

}  // namespace
}  // namespace loom::compiler::passes
