// copy_back: an output that updates an input but is not written in place.
#include "compiler/cuda/plan_copy_back.h"

#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(CopyBack, AnUpdateNotWrittenInPlaceIsCopiedBack) {
  auto g = ir::ParseGraph(R"IR(graph @g(%p: f32[4, 8] state, %x: f32[4, 8]) {
  %0 = add(%p, %x) : f32[4, 8]
  return %0 -> %p
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->launches.size(), 2u) << p->Describe();
  const Launch& c = p->launches.back();
  EXPECT_EQ(c.kind, LaunchKind::kCopyBack);
  EXPECT_EQ(c.copy_back_input, 0);
  EXPECT_EQ(c.inputs, std::vector<int>{g->nodes()[0].outputs[0]});
  EXPECT_GE(p->offset[g->nodes()[0].outputs[0]], 0) << "the sum lives in the arena until it is copied";
}

TEST(CopyBack, InPlaceUpdatesNeedNone) {
  // AdamW writes param, m and v in place: no copy_back on a training step.
  ir::Graph g = GptJoint(1);
  auto p = PlanCuda(g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  int updates = 0;
  for (const ir::GraphOutput& o : g.outputs()) updates += o.updates >= 0;
  EXPECT_GT(updates, 10);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopyBack), 0);
}

}  // namespace
}  // namespace loom::compiler::cuda
