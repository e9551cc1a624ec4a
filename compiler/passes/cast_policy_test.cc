#include "compiler/passes/cast_policy.h"

#include "compiler/testing/pass_test_util.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectPassOn;

TEST(CastPolicyTest, AssignsComputeDtypes) {
  CastPolicyPass pass(ComputeIn(DType::kBF16, {"test.matmul"}));
  ExpectPassOn(pass, R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 8]) {
  %0 = test.matmul(%x, %w) : f32[4, 8]
  %1 = test.relu(%0) : f32[4, 8]
  return %1
}
)IR",
               R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 8]) {
  %0 = test.matmul(%x, %w) compute=bf16 : f32[4, 8]
  %1 = test.relu(%0) : f32[4, 8]
  return %1
}
)IR",
               true);
}

TEST(CastPolicyTest, KeepPrecisionChangesNothing) {
  CastPolicyPass pass(KeepPrecision());
  constexpr char kText[] = R"IR(graph @g(%x: f32[4, 8], %w: f32[8, 8]) {
  %0 = test.matmul(%x, %w) compute=bf16 : f32[4, 8]
  return %0
}
)IR";
  ExpectPassOn(pass, kText, kText, false);
}

}  // namespace
}  // namespace loom::compiler::passes
