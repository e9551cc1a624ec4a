#include "compiler/passes/recover_norms.h"

#include "compiler/testing/recover_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectRecovered;
using testing::ExpectUnchanged;

constexpr char kLayerNorm[] = R"IR(graph @g(%x: f32[2, 3, 8], %w: f32[8] param, %b: f32[8] param) {
  %0, %1, %2 = layernorm(%x, %w, %b) {eps=1.0000000000000001e-05} : f32[2, 3, 8], f32[2, 3], f32[2, 3]
  return %0
}
)IR";

TEST(RecoverNormsTest, LayerNormAsOpset14ExportsIt) {
  recover::MatchLog log;
  ExpectRecovered(RecoverNorms(nullptr, &log), R"IR(graph @g(%x: f32[2, 3, 8], %w: f32[8] param, %b: f32[8] param) {
  %0 = mean(%x) {axes=[2], keepdim=true} : f32[2, 3, 1]
  %1 = sub(%x, %0) : f32[2, 3, 8]
  %2 = pow_scalar(%1) {p=2.0} : f32[2, 3, 8]
  %3 = mean(%2) {axes=[2], keepdim=true} : f32[2, 3, 1]
  %4 = add_scalar(%3) {s=1.0000000000000001e-05} : f32[2, 3, 1]
  %5 = sqrt(%4) : f32[2, 3, 1]
  %6 = div(%1, %5) : f32[2, 3, 8]
  %7 = mul(%6, %w) : f32[2, 3, 8]
  %8 = add(%7, %b) : f32[2, 3, 8]
  return %8
}
)IR",
                  kLayerNorm);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "layernorm: %w, %b, eps 1e-05 over f32[2, 3, 8]");
}

TEST(RecoverNormsTest, LayerNormOtherSpellings) {  // mul(d, d), rsqrt, negative axes, operands swapped
  ExpectRecovered(RecoverNorms(), R"IR(graph @g(%x: f32[2, 3, 8], %w: f32[8] param, %b: f32[8] param) {
  %0 = mean(%x) {axes=[-1], keepdim=true} : f32[2, 3, 1]
  %1 = sub(%x, %0) : f32[2, 3, 8]
  %2 = mul(%1, %1) : f32[2, 3, 8]
  %3 = mean(%2) {axes=[-1], keepdim=true} : f32[2, 3, 1]
  %4 = add_scalar(%3) {s=1.0000000000000001e-05} : f32[2, 3, 1]
  %5 = rsqrt(%4) : f32[2, 3, 1]
  %6 = mul(%5, %1) : f32[2, 3, 8]
  %7 = mul(%w, %6) : f32[2, 3, 8]
  %8 = add(%b, %7) : f32[2, 3, 8]
  return %8
}
)IR",
                  kLayerNorm);
}

TEST(RecoverNormsTest, RmsNormAsLlamaWritesIt) {
  recover::ConstantTable consts = {{"one", testing::ScalarF32(1.0)}, {"eps", testing::ScalarF32(1e-6)}};
  ExpectRecovered(RecoverNorms(&consts), R"IR(graph @g(%x: f32[4, 8], %w: f32[8] param, %one: f32[] const, %eps: f32[] const) {
  %0 = pow_scalar(%x) {p=2.0} : f32[4, 8]
  %1 = mean(%0) {axes=[1], keepdim=true} : f32[4, 1]
  %2 = add(%1, %eps) : f32[4, 1]
  %3 = sqrt(%2) : f32[4, 1]
  %4 = div(%one, %3) : f32[4, 1]
  %5 = mul(%x, %4) : f32[4, 8]
  %6 = mul(%w, %5) : f32[4, 8]
  return %6
}
)IR",
                  R"IR(graph @g(%x: f32[4, 8], %w: f32[8] param, %one: f32[] const, %eps: f32[] const) {
  %0, %1 = rmsnorm(%x, %w) {eps=9.9999999747524271e-07} : f32[4, 8], f32[4]
  return %0
}
)IR",
                  consts);
}

TEST(RecoverNormsTest, LayerNormWithoutBiasIsRmsNormOfTheCentredInput) {
  // (x - m) / sqrt(mean((x - m)^2) + eps) * w: exactly rmsnorm over x - m.
  ExpectRecovered(RecoverNorms(), R"IR(graph @g(%x: f32[3, 8], %w: f32[8] param) {
  %0 = mean(%x) {axes=[1], keepdim=true} : f32[3, 1]
  %1 = sub(%x, %0) : f32[3, 8]
  %2 = pow_scalar(%1) {p=2.0} : f32[3, 8]
  %3 = mean(%2) {axes=[1], keepdim=true} : f32[3, 1]
  %4 = add_scalar(%3) {s=1.0000000000000001e-05} : f32[3, 1]
  %5 = sqrt(%4) : f32[3, 1]
  %6 = div(%1, %5) : f32[3, 8]
  %7 = mul(%6, %w) : f32[3, 8]
  return %7
}
)IR",
                  R"IR(graph @g(%x: f32[3, 8], %w: f32[8] param) {
  %0 = mean(%x) {axes=[1], keepdim=true} : f32[3, 1]
  %1 = sub(%x, %0) : f32[3, 8]
  %2, %3 = rmsnorm(%1, %w) {eps=1.0000000000000001e-05} : f32[3, 8], f32[3]
  return %2
}
)IR");
}

// The decomposed LayerNorm with one piece changed; each must stay as it is.
std::string LayerNormWith(const std::string& mean1, const std::string& var, const std::string& eps,
                          const std::string& ret) {
  return R"IR(graph @g(%x: f32[2, 3, 8], %w: f32[8] param, %b: f32[8] param) {
  %0 = mean(%x) )IR" + mean1 + R"IR( : f32[2, 3, 1]
  %1 = sub(%x, %0) : f32[2, 3, 8]
  %2 = pow_scalar(%1) {p=2.0} : f32[2, 3, 8]
  %3 = )IR" + var + R"IR( : f32[2, 3, 1]
  %4 = add_scalar(%3) {s=)IR" + eps + R"IR(} : f32[2, 3, 1]
  %5 = sqrt(%4) : f32[2, 3, 1]
  %6 = div(%1, %5) : f32[2, 3, 8]
  %7 = mul(%6, %w) : f32[2, 3, 8]
  %8 = add(%7, %b) : f32[2, 3, 8]
  return )IR" + ret + R"IR(
}
)IR";
}

TEST(RecoverNormsTest, NearMisses) {
  const std::string mean = "{axes=[2], keepdim=true}", var = "mean(%2) {axes=[2], keepdim=true}";
  // The statistics over another axis.
  ExpectUnchanged(RecoverNorms(), R"IR(graph @g(%x: f32[8, 8], %w: f32[8] param, %b: f32[8] param) {
  %0 = mean(%x) {axes=[0], keepdim=true} : f32[1, 8]
  %1 = sub(%x, %0) : f32[8, 8]
  %2 = pow_scalar(%1) {p=2.0} : f32[8, 8]
  %3 = mean(%2) {axes=[0], keepdim=true} : f32[1, 8]
  %4 = add_scalar(%3) {s=1.0000000000000001e-05} : f32[1, 8]
  %5 = sqrt(%4) : f32[1, 8]
  %6 = div(%1, %5) : f32[8, 8]
  %7 = mul(%6, %w) : f32[8, 8]
  %8 = add(%7, %b) : f32[8, 8]
  return %8
}
)IR");
  // A sum where the variance's mean should be (the unbiased variance scales a sum).
  ExpectUnchanged(RecoverNorms(), LayerNormWith(mean, "sum(%2) {axes=[2], keepdim=true}", "1.0000000000000001e-05", "%8"));
  // eps = 0 (layernorm takes a positive eps).
  ExpectUnchanged(RecoverNorms(), LayerNormWith(mean, var, "0.0", "%8"));
  // The normalised value is returned too: it must stay computed.
  ExpectUnchanged(RecoverNorms(), LayerNormWith(mean, var, "1.0000000000000001e-05", "%8, %6"));
}

TEST(RecoverNormsTest, ReturnedMeanKeepsTheCentringOnly) {
  // The mean must stay computed, so LayerNorm does not match; what follows
  // the centring is still exactly rmsnorm over x - mean.
  ExpectRecovered(RecoverNorms(), LayerNormWith("{axes=[2], keepdim=true}", "mean(%2) {axes=[2], keepdim=true}",
                                                "1.0000000000000001e-05", "%8, %0"),
                  R"IR(graph @g(%x: f32[2, 3, 8], %w: f32[8] param, %b: f32[8] param) {
  %0 = mean(%x) {axes=[2], keepdim=true} : f32[2, 3, 1]
  %1 = sub(%x, %0) : f32[2, 3, 8]
  %2, %3 = rmsnorm(%1, %w) {eps=1.0000000000000001e-05} : f32[2, 3, 8], f32[2, 3]
  %4 = add(%2, %b) : f32[2, 3, 8]
  return %4, %0
}
)IR");
}

TEST(RecoverNormsTest, RmsNormNearMisses) {
  // A different value squared than normalised.
  ExpectUnchanged(RecoverNorms(), R"IR(graph @g(%x: f32[4, 8], %y: f32[4, 8], %w: f32[8] param) {
  %0 = pow_scalar(%y) {p=2.0} : f32[4, 8]
  %1 = mean(%0) {axes=[1], keepdim=true} : f32[4, 1]
  %2 = add_scalar(%1) {s=9.9999999999999995e-07} : f32[4, 1]
  %3 = rsqrt(%2) : f32[4, 1]
  %4 = mul(%x, %3) : f32[4, 8]
  %5 = mul(%4, %w) : f32[4, 8]
  return %5
}
)IR");
  // A weight of the input's full shape is not the norm's [C] weight.
  ExpectUnchanged(RecoverNorms(), R"IR(graph @g(%x: f32[4, 8], %w: f32[4, 8] param) {
  %0 = pow_scalar(%x) {p=2.0} : f32[4, 8]
  %1 = mean(%0) {axes=[1], keepdim=true} : f32[4, 1]
  %2 = add_scalar(%1) {s=9.9999999999999995e-07} : f32[4, 1]
  %3 = rsqrt(%2) : f32[4, 1]
  %4 = mul(%x, %3) : f32[4, 8]
  %5 = mul(%4, %w) : f32[4, 8]
  return %5
}
)IR");
  // Without keepdim the statistics do not broadcast back as a norm's.
  ExpectUnchanged(RecoverNorms(), R"IR(graph @g(%x: f32[8, 8], %w: f32[8] param) {
  %0 = pow_scalar(%x) {p=2.0} : f32[8, 8]
  %1 = mean(%0) {axes=[1]} : f32[8]
  %2 = add_scalar(%1) {s=9.9999999999999995e-07} : f32[8]
  %3 = rsqrt(%2) : f32[8]
  %4 = mul(%x, %3) : f32[8, 8]
  %5 = mul(%4, %w) : f32[8, 8]
  return %5
}
)IR");
}

}  // namespace
}  // namespace loom::compiler::passes
