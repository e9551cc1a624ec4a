// ScheduleCollectivesEarly in IR text: gradient reductions move right after
// their producers; collectives over graph inputs stay; the ZeRO-1 slice of an
// all_reduce follows it.
#include "compiler/spmd/schedule.h"

#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::spmd {
namespace {

std::string Schedule(const std::string& text, bool* changed = nullptr, bool all_reduce = true) {
  auto g = ir::ParseGraph(text);
  if (!g.ok()) return "parse error: " + std::string(g.status().message());
  ScheduleOptions o;
  o.all_reduce = all_reduce;
  auto r = ScheduleCollectivesEarly(*g, o);
  if (!r.ok()) return "error: " + std::string(r.status().message());
  if (changed) *changed = *r;
  return ir::PrintGraph(*g);
}

// (The printer numbers values in node order.)
TEST(Schedule, ReduceScatterMovesRightAfterItsProducer) {
  bool changed = false;
  EXPECT_EQ(Schedule(R"(graph @g(%a: f32[8, 4], %b: f32[8, 4]) {
  %0 = mul(%a, %b) : f32[8, 4]
  %1 = exp(%a) : f32[8, 4]
  %2 = exp(%1) : f32[8, 4]
  %3 = reduce_scatter(%0) {axis=0, group="dp", reduce="sum", world=2} : f32[4, 4]
  %4 = all_reduce(%1) {group="dp", reduce="sum", world=2} : f32[8, 4]
  %5 = shard_slice(%4) {axis=0, group="dp", world=2} : f32[4, 4]
  %6 = add(%3, %5) : f32[4, 4]
  return %6, %2
})",
                     &changed),
            R"(graph @g(%a: f32[8, 4], %b: f32[8, 4]) {
  %0 = mul(%a, %b) : f32[8, 4]
  %1 = reduce_scatter(%0) {axis=0, group="dp", reduce="sum", world=2} : f32[4, 4]
  %2 = exp(%a) : f32[8, 4]
  %3 = all_reduce(%2) {group="dp", reduce="sum", world=2} : f32[8, 4]
  %4 = shard_slice(%3) {axis=0, group="dp", world=2} : f32[4, 4]
  %5 = exp(%2) : f32[8, 4]
  %6 = add(%1, %4) : f32[4, 4]
  return %6, %5
}
)");
  EXPECT_TRUE(changed);
}

TEST(Schedule, CollectivesOfGraphInputsAndSlicesOfInputsStay) {
  const std::string text = R"(graph @g(%a: f32[8, 4], %b: f32[8, 4]) {
  %0 = exp(%b) : f32[8, 4]
  %1 = shard_slice(%a) {axis=0, group="dp", world=2} : f32[4, 4]
  %2 = all_reduce(%a) {group="dp", reduce="sum", world=2} : f32[8, 4]
  %3 = add(%0, %2) : f32[8, 4]
  return %3, %1
}
)";
  bool changed = true;
  EXPECT_EQ(Schedule(text, &changed), text);
  EXPECT_FALSE(changed);
}

TEST(Schedule, AllReducesStayByDefault) {
  EXPECT_EQ(Schedule(R"(graph @g(%a: f32[8, 4]) {
  %0 = exp(%a) : f32[8, 4]
  %1 = exp(%0) : f32[8, 4]
  %2 = all_reduce(%0) {group="dp", reduce="sum", world=2} : f32[8, 4]
  %3 = reduce_scatter(%0) {axis=0, group="dp", reduce="sum", world=2} : f32[4, 4]
  return %1, %2, %3
})",
                     nullptr, /*all_reduce=*/false),
            R"(graph @g(%a: f32[8, 4]) {
  %0 = exp(%a) : f32[8, 4]
  %1 = reduce_scatter(%0) {axis=0, group="dp", reduce="sum", world=2} : f32[4, 4]
  %2 = exp(%0) : f32[8, 4]
  %3 = all_reduce(%0) {group="dp", reduce="sum", world=2} : f32[8, 4]
  return %2, %3, %1
}
)");
}

}  // namespace
}  // namespace loom::compiler::spmd
