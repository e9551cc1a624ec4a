#include "compiler/passes/recover_positions.h"

#include "compiler/testing/recover_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

using testing::ExpectRecovered;
using testing::ExpectUnchanged;

Tensor Ids(Shape shape, std::vector<double> v) { return Tensor::FromVector(shape, v, DType::kI64); }

TEST(RecoverPositionsTest, WholeTableBecomesTheTable) {  // wpe(arange(T)) with T = the table's rows
  recover::ConstantTable consts = {{"pos", Ids({4}, {0, 1, 2, 3})}};
  recover::MatchLog log;
  ExpectRecovered(RecoverPositions(&consts, &log), R"IR(graph @g(%tok: f32[2, 4, 3], %wpe: f32[4, 3] param, %pos: i64[4] const) {
  %0 = gather(%wpe, %pos) {axis=0} : f32[4, 3]
  %1 = add(%tok, %0) : f32[2, 4, 3]
  return %1
}
)IR",
                  R"IR(graph @g(%tok: f32[2, 4, 3], %wpe: f32[4, 3] param, %pos: i64[4] const) {
  %0 = add(%tok, %wpe) : f32[2, 4, 3]
  return %0
}
)IR",
                  consts);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "positions: gather(%wpe, 0..3) -> %wpe");
}

TEST(RecoverPositionsTest, PrefixOfRowsAsHuggingFacePositionIds) {  // position_ids [1, T], T < rows
  recover::ConstantTable consts = {{"pos", Ids({1, 3}, {0, 1, 2})}};
  ExpectRecovered(RecoverPositions(&consts), R"IR(graph @g(%wpe: f32[5, 2] param, %pos: i64[1, 3] const) {
  %0 = embedding(%wpe, %pos) : f32[1, 3, 2]
  return %0
}
)IR",
                  R"IR(graph @g(%wpe: f32[5, 2] param, %pos: i64[1, 3] const) {
  %0 = slice(%wpe) {axis=0, length=3, start=0} : f32[3, 2]
  %1 = reshape(%0) {shape=[1, 3, 2]} : f32[1, 3, 2]
  return %1
}
)IR",
                  consts);
}

TEST(RecoverPositionsTest, NearMisses) {
  constexpr char kGather[] = R"IR(graph @g(%wpe: f32[4, 3] param, %pos: i64[4] const) {
  %0 = gather(%wpe, %pos) {axis=0} : f32[4, 3]
  return %0
}
)IR";
  recover::ConstantTable reversed = {{"pos", Ids({4}, {3, 2, 1, 0})}};
  ExpectUnchanged(RecoverPositions(&reversed), kGather);
  recover::ConstantTable negative = {{"pos", Ids({4}, {-4, -3, -2, -1})}};  // the same rows, numbered from the end
  ExpectUnchanged(RecoverPositions(&negative), kGather);
  recover::ConstantTable none;  // indices not known at compile time
  ExpectUnchanged(RecoverPositions(&none), kGather);
  recover::ConstantTable ids = {{"pos", Ids({3}, {0, 1, 2})}};
  ExpectUnchanged(RecoverPositions(&ids), R"IR(graph @g(%w: f32[3, 3] param, %pos: i64[3] const) {
  %0 = gather(%w, %pos) {axis=1} : f32[3, 3]
  return %0
}
)IR");
}

}  // namespace
}  // namespace loom::compiler::passes
