#include "compiler/passes/pass.h"

#include "compiler/ir/text.h"
#include "compiler/passes/cse.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/fusion.h"
#include "gtest/gtest.h"

namespace loom::compiler::passes {
namespace {

class BreakEverything : public Pass {
 public:
  absl::string_view name() const override { return "break"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override {
    g.AddOutput(999999);
    return true;
  }
};

TEST(PassPipelineTest, ReportsPerPassChanges) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[4]) {
  %0 = test.exp(%x) : f32[4]
  %1 = test.exp(%x) : f32[4]
  %2 = test.add(%0, %1) : f32[4]
  %3 = test.relu(%x) : f32[4]
  return %2
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  PassPipeline p;
  p.Add<DeadCodeElimination>().Add<CommonSubexpressionElimination>().Add<DeadCodeElimination>().Add<
      ElementwiseFusion>();
  auto r = p.Run(*g);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].name, "dce");
  EXPECT_TRUE((*r)[0].changed);   // drops relu
  EXPECT_TRUE((*r)[1].changed);   // merges the exps
  EXPECT_FALSE((*r)[2].changed);  // nothing left to drop
  EXPECT_TRUE((*r)[3].changed);   // exp + add fuse
  EXPECT_EQ(ir::PrintGraph(*g), R"IR(graph @g(%x: f32[4]) {
  %0 = fused(%x) : f32[4] graph @fused_0(%x0: f32[4]) {
    %0 = test.exp(%x0) : f32[4]
    %1 = test.add(%0, %0) : f32[4]
    return %1
  }
  return %0
}
)IR");
}

TEST(PassPipelineTest, VerifiesAfterEachPassAndNamesTheCulprit) {
  auto g = ir::ParseGraph("graph @g(%x: f32[4]) {\n  return %x\n}");
  ASSERT_TRUE(g.ok());
  PassPipeline p;
  p.Add<BreakEverything>();
  auto r = p.Run(*g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("pass break"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace loom::compiler::passes
