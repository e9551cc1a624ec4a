#include "compiler/passes/recover_gelu.h"

#include "compiler/testing/recover_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectRecovered;
using testing::ExpectUnchanged;

constexpr char kGeluErf[] = R"IR(graph @g(%x: f32[4, 8]) {
  %0 = gelu(%x) {approximate="none"} : f32[4, 8]
  return %0
}
)IR";
constexpr char kGeluTanh[] = R"IR(graph @g(%x: f32[4, 8]) {
  %0 = gelu(%x) {approximate="tanh"} : f32[4, 8]
  return %0
}
)IR";

TEST(RecoverGeluTest, ErfFormAsTorchExportsIt) {  // Mul(Mul(x, Add(Erf(Div(x, 1.4142135)), 1)), 0.5)
  recover::MatchLog log;
  ExpectRecovered(RecoverGelu(nullptr, &log), R"IR(graph @g(%x: f32[4, 8]) {
  %0 = scale(%x) {s=0.70710679328816484} : f32[4, 8]
  %1 = erf(%0) : f32[4, 8]
  %2 = add_scalar(%1) {s=1.0} : f32[4, 8]
  %3 = mul(%x, %2) : f32[4, 8]
  %4 = scale(%3) {s=0.5} : f32[4, 8]
  return %4
}
)IR",
                  kGeluErf);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "gelu: erf form -> gelu{approximate=none} over f32[4, 8]");
}

TEST(RecoverGeluTest, TanhFormAsTorchExportsIt) {  // x * (x * x) for the cube
  ExpectRecovered(RecoverGelu(), R"IR(graph @g(%x: f32[4, 8]) {
  %0 = mul(%x, %x) : f32[4, 8]
  %1 = mul(%x, %0) : f32[4, 8]
  %2 = scale(%1) {s=0.044714998453855515} : f32[4, 8]
  %3 = add(%x, %2) : f32[4, 8]
  %4 = scale(%3) {s=0.79788458347320557} : f32[4, 8]
  %5 = tanh(%4) : f32[4, 8]
  %6 = add_scalar(%5) {s=1.0} : f32[4, 8]
  %7 = mul(%x, %6) : f32[4, 8]
  %8 = scale(%7) {s=0.5} : f32[4, 8]
  return %8
}
)IR",
                  kGeluTanh);
}

TEST(RecoverGeluTest, TanhFormAsHuggingFaceWritesIt) {  // 0.5 * x * (1 + tanh(c * (x + 0.044715 * pow(x, 3))))
  ExpectRecovered(RecoverGelu(), R"IR(graph @g(%x: f32[4, 8]) {
  %0 = scale(%x) {s=0.5} : f32[4, 8]
  %1 = pow_scalar(%x) {p=3.0} : f32[4, 8]
  %2 = scale(%1) {s=0.044715} : f32[4, 8]
  %3 = add(%x, %2) : f32[4, 8]
  %4 = scale(%3) {s=0.79788456080286541} : f32[4, 8]
  %5 = tanh(%4) : f32[4, 8]
  %6 = add_scalar(%5) {s=1.0} : f32[4, 8]
  %7 = mul(%0, %6) : f32[4, 8]
  return %7
}
)IR",
                  kGeluTanh);
}

TEST(RecoverGeluTest, ConstantsReadAsInputs) {  // x * 0.5 * (1 + erf(x * c)), c and 1 as const inputs
  recover::ConstantTable consts = {{"c", testing::ScalarF32(0.7071067811865476)}, {"one", testing::ScalarF32(1.0)}};
  ExpectRecovered(RecoverGelu(&consts), R"IR(graph @g(%x: f32[4, 8], %c: f32[] const, %one: f32[] const) {
  %0 = mul(%x, %c) : f32[4, 8]
  %1 = erf(%0) : f32[4, 8]
  %2 = add(%one, %1) : f32[4, 8]
  %3 = scale(%x) {s=0.5} : f32[4, 8]
  %4 = mul(%3, %2) : f32[4, 8]
  return %4
}
)IR",
                  R"IR(graph @g(%x: f32[4, 8], %c: f32[] const, %one: f32[] const) {
  %0 = gelu(%x) {approximate="none"} : f32[4, 8]
  return %0
}
)IR",
                  consts);
}

TEST(RecoverGeluTest, NearMisses) {
  // Quick GELU, x * sigmoid(1.702 x): not GELU.
  ExpectUnchanged(RecoverGelu(), R"IR(graph @g(%x: f32[4, 8]) {
  %0 = scale(%x) {s=1.702} : f32[4, 8]
  %1 = sigmoid(%0) : f32[4, 8]
  %2 = mul(%x, %1) : f32[4, 8]
  return %2
}
)IR");
  // A cubic coefficient other than 0.044715.
  ExpectUnchanged(RecoverGelu(), R"IR(graph @g(%x: f32[4, 8]) {
  %0 = pow_scalar(%x) {p=3.0} : f32[4, 8]
  %1 = scale(%0) {s=0.050000000000000003} : f32[4, 8]
  %2 = add(%x, %1) : f32[4, 8]
  %3 = scale(%2) {s=0.79788458347320557} : f32[4, 8]
  %4 = tanh(%3) : f32[4, 8]
  %5 = add_scalar(%4) {s=1.0} : f32[4, 8]
  %6 = mul(%x, %5) : f32[4, 8]
  %7 = scale(%6) {s=0.5} : f32[4, 8]
  return %7
}
)IR");
  // The erf of another value than the one multiplied.
  ExpectUnchanged(RecoverGelu(), R"IR(graph @g(%x: f32[4, 8], %y: f32[4, 8]) {
  %0 = scale(%y) {s=0.70710679328816484} : f32[4, 8]
  %1 = erf(%0) : f32[4, 8]
  %2 = add_scalar(%1) {s=1.0} : f32[4, 8]
  %3 = mul(%x, %2) : f32[4, 8]
  %4 = scale(%3) {s=0.5} : f32[4, 8]
  return %4
}
)IR");
  // 0.25 outside instead of 0.5; and 1/2 inside the erf instead of 1/sqrt(2).
  ExpectUnchanged(RecoverGelu(), R"IR(graph @g(%x: f32[4, 8]) {
  %0 = scale(%x) {s=0.70710679328816484} : f32[4, 8]
  %1 = erf(%0) : f32[4, 8]
  %2 = add_scalar(%1) {s=1.0} : f32[4, 8]
  %3 = mul(%x, %2) : f32[4, 8]
  %4 = scale(%3) {s=0.25} : f32[4, 8]
  %5 = scale(%x) {s=0.5} : f32[4, 8]
  %6 = erf(%5) : f32[4, 8]
  %7 = add_scalar(%6) {s=1.0} : f32[4, 8]
  %8 = mul(%x, %7) : f32[4, 8]
  %9 = scale(%8) {s=0.5} : f32[4, 8]
  return %4, %9
}
)IR");
  // The erf's value is returned too: the pattern's interior must stay.
  ExpectUnchanged(RecoverGelu(), R"IR(graph @g(%x: f32[4, 8]) {
  %0 = scale(%x) {s=0.70710679328816484} : f32[4, 8]
  %1 = erf(%0) : f32[4, 8]
  %2 = add_scalar(%1) {s=1.0} : f32[4, 8]
  %3 = mul(%x, %2) : f32[4, 8]
  %4 = scale(%3) {s=0.5} : f32[4, 8]
  return %4, %1
}
)IR");
}

}  // namespace
}  // namespace loom::compiler::passes
