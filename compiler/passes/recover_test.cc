// The recovery pipeline (recover.h) on one pre-LN transformer block as torch
// 1.13 exports it at opset 14, after import: every pattern matched once, the
// causal mask's const inputs dropped from the graph and the table, the
// parameters untouched, and the outputs equal to the decomposed block's.
#include "compiler/passes/recover.h"

#include <limits>

#include "compiler/ir/text.h"
#include "compiler/testing/recover_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

constexpr char kBlock[] = R"IR(graph @block(%tok: f32[2, 4, 8], %wpe: f32[4, 8] param, %ln.weight: f32[8] param, %ln.bias: f32[8] param, %qkv.weight: f32[24, 8] param, %qkv.bias: f32[24] param, %fc.weight: f32[32, 8] param, %fc.bias: f32[32] param, %pos: i64[4] const, %drop: bool[1, 1, 4, 4] const, %ninf: f32[] const) {
  %0 = gather(%wpe, %pos) {axis=0} : f32[4, 8]
  %1 = add(%tok, %0) : f32[2, 4, 8]
  %2 = mean(%1) {axes=[2], keepdim=true} : f32[2, 4, 1]
  %3 = sub(%1, %2) : f32[2, 4, 8]
  %4 = pow_scalar(%3) {p=2.0} : f32[2, 4, 8]
  %5 = mean(%4) {axes=[2], keepdim=true} : f32[2, 4, 1]
  %6 = add_scalar(%5) {s=9.9999997473787516e-06} : f32[2, 4, 1]
  %7 = sqrt(%6) : f32[2, 4, 1]
  %8 = div(%3, %7) : f32[2, 4, 8]
  %9 = mul(%8, %ln.weight) : f32[2, 4, 8]
  %10 = add(%9, %ln.bias) : f32[2, 4, 8]
  %11 = permute(%qkv.weight) {dims=[1, 0]} : f32[8, 24]
  %12 = matmul(%10, %11) : f32[2, 4, 24]
  %13 = add(%qkv.bias, %12) : f32[2, 4, 24]
  %14 = slice(%13) {axis=2, length=8, start=0} : f32[2, 4, 8]
  %15 = slice(%13) {axis=2, length=8, start=8} : f32[2, 4, 8]
  %16 = slice(%13) {axis=2, length=8, start=16} : f32[2, 4, 8]
  %17 = reshape(%14) {shape=[2, 4, 2, 4]} : f32[2, 4, 2, 4]
  %18 = permute(%17) {dims=[0, 2, 1, 3]} : f32[2, 2, 4, 4]
  %19 = reshape(%15) {shape=[2, 4, 2, 4]} : f32[2, 4, 2, 4]
  %20 = permute(%19) {dims=[0, 2, 3, 1]} : f32[2, 2, 4, 4]
  %21 = reshape(%16) {shape=[2, 4, 2, 4]} : f32[2, 4, 2, 4]
  %22 = permute(%21) {dims=[0, 2, 1, 3]} : f32[2, 2, 4, 4]
  %23 = matmul(%18, %20) : f32[2, 2, 4, 4]
  %24 = scale(%23) {s=0.5} : f32[2, 2, 4, 4]
  %25 = where(%drop, %ninf, %24) : f32[2, 2, 4, 4]
  %26 = softmax(%25) {axis=3} : f32[2, 2, 4, 4]
  %27 = matmul(%26, %22) : f32[2, 2, 4, 4]
  %28 = permute(%27) {dims=[0, 2, 1, 3]} : f32[2, 4, 2, 4]
  %29 = reshape(%28) {shape=[2, 4, 8]} : f32[2, 4, 8]
  %30 = permute(%fc.weight) {dims=[1, 0]} : f32[8, 32]
  %31 = matmul(%29, %30) : f32[2, 4, 32]
  %32 = add(%fc.bias, %31) : f32[2, 4, 32]
  %33 = scale(%32) {s=0.70710679328816484} : f32[2, 4, 32]
  %34 = erf(%33) : f32[2, 4, 32]
  %35 = add_scalar(%34) {s=1.0} : f32[2, 4, 32]
  %36 = mul(%32, %35) : f32[2, 4, 32]
  %37 = scale(%36) {s=0.5} : f32[2, 4, 32]
  return %37
}
)IR";

constexpr char kRecovered[] = R"IR(graph @block(%tok: f32[2, 4, 8], %wpe: f32[4, 8] param, %ln.weight: f32[8] param, %ln.bias: f32[8] param, %qkv.weight: f32[24, 8] param, %qkv.bias: f32[24] param, %fc.weight: f32[32, 8] param, %fc.bias: f32[32] param) {
  %0 = add(%tok, %wpe) : f32[2, 4, 8]
  %1, %2, %3 = layernorm(%0, %ln.weight, %ln.bias) {eps=9.9999997473787516e-06} : f32[2, 4, 8], f32[2, 4], f32[2, 4]
  %4 = matmul(%1, %qkv.weight) {trans_b=true} : f32[2, 4, 24]
  %5 = add(%4, %qkv.bias) : f32[2, 4, 24]
  %6 = slice(%5) {axis=2, length=8, start=0} : f32[2, 4, 8]
  %7 = slice(%5) {axis=2, length=8, start=8} : f32[2, 4, 8]
  %8 = slice(%5) {axis=2, length=8, start=16} : f32[2, 4, 8]
  %9 = reshape(%6) {shape=[2, 4, 2, 4]} : f32[2, 4, 2, 4]
  %10 = permute(%9) {dims=[0, 2, 1, 3]} : f32[2, 2, 4, 4]
  %11 = reshape(%7) {shape=[2, 4, 2, 4]} : f32[2, 4, 2, 4]
  %12 = reshape(%8) {shape=[2, 4, 2, 4]} : f32[2, 4, 2, 4]
  %13 = permute(%12) {dims=[0, 2, 1, 3]} : f32[2, 2, 4, 4]
  %14 = permute(%11) {dims=[0, 2, 1, 3]} : f32[2, 2, 4, 4]
  %15, %16 = sdpa(%10, %14, %13) {is_causal=true} : f32[2, 2, 4, 4], f32[2, 2, 4]
  %17 = permute(%15) {dims=[0, 2, 1, 3]} : f32[2, 4, 2, 4]
  %18 = reshape(%17) {shape=[2, 4, 8]} : f32[2, 4, 8]
  %19 = matmul(%18, %fc.weight) {trans_b=true} : f32[2, 4, 32]
  %20 = add(%19, %fc.bias) : f32[2, 4, 32]
  %21 = gelu(%20) {approximate="none"} : f32[2, 4, 32]
  return %21
}
)IR";

TEST(RecoverFastOpsTest, PreLnBlockAsExported) {
  recover::ConstantTable consts = {{"pos", Tensor::FromVector({4}, {0, 1, 2, 3}, DType::kI64)},
                                   {"drop", testing::CausalBoolMask(4, 4, false)},
                                   {"ninf", testing::ScalarF32(-std::numeric_limits<double>::infinity())}};
  const recover::ConstantTable before_consts = consts;
  auto g = ir::ParseGraph(kBlock);
  ASSERT_TRUE(g.ok()) << g.status();
  ir::Graph after = *g;
  auto log = RecoverFastOps(after, consts);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(ir::PrintGraph(after), kRecovered);
  ASSERT_EQ(log->size(), 6u);
  EXPECT_EQ((*log)[0], "positions: gather(%wpe, 0..3) -> %wpe");
  EXPECT_EQ((*log)[1], "linear: x @ %qkv.weight^T + %qkv.bias -> matmul{trans_b=true} + add");
  EXPECT_EQ((*log)[2], "linear: x @ %fc.weight^T + %fc.bias -> matmul{trans_b=true} + add");
  EXPECT_EQ((*log)[3], "layernorm: %ln.weight, %ln.bias, eps 1e-05 over f32[2, 4, 8]");
  EXPECT_EQ((*log)[4], "gelu: erf form -> gelu{approximate=none} over f32[2, 4, 32]");
  EXPECT_EQ((*log)[5], "attention: q f32[2, 2, 4, 4], scale 0.5 (1/sqrt(D)), mask where(%drop -> -inf) causal -> "
                       "sdpa{is_causal=true}");
  EXPECT_TRUE(consts.empty()) << "the position ids, the mask and its fill are no longer read";
  std::string why;
  EXPECT_LE(testing::MaxRelativeDifference(*g, after, before_consts, &why), 1e-5) << why;
}

TEST(RecoverFastOpsTest, NothingToRecover) {
  recover::ConstantTable consts;
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 8] param) {
  %0 = matmul(%x, %w) : f32[4, 8]
  %1 = relu(%0) : f32[4, 8]
  return %1
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto log = RecoverFastOps(*g, consts);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_TRUE(log->empty());
}

}  // namespace
}  // namespace loom::compiler::passes
