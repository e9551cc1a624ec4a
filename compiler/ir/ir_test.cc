#include "compiler/ir/ir.h"

#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace loom::compiler::ir {
namespace {

TEST(GraphTest, BuilderInfersShapes) {
  Graph g("mlp");
  int x = g.AddInput("x", {DType::kF32, {4, 8}});
  int w = g.AddInput("w", {DType::kF32, {8, 16}}, InputKind::kParam);
  auto y = g.AddOp1("test.matmul", {x, w});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.meta(*y).ToString(), "f32[4, 16]");
  auto r = g.AddOp1("test.relu", {*y});
  ASSERT_TRUE(r.ok());
  g.AddOutput(*r);
  EXPECT_TRUE(Verify(g).ok());
}

TEST(GraphTest, BuilderRejectsBadShapesNamingTheOp) {
  Graph g;
  int x = g.AddInput("x", {DType::kF32, {4, 8}});
  int w = g.AddInput("w", {DType::kF32, {9, 16}});
  auto y = g.AddOp1("test.matmul", {x, w});
  ASSERT_FALSE(y.ok());
  EXPECT_NE(std::string(y.status().message()).find("test.matmul"), std::string::npos) << y.status();
  auto z = g.AddOp1("no.such.op", {x});
  ASSERT_FALSE(z.ok());
  EXPECT_NE(std::string(z.status().message()).find("no.such.op"), std::string::npos);
  auto bad_arity = g.AddOp1("test.add", {x});
  EXPECT_FALSE(bad_arity.ok());
}

TEST(GraphTest, VerifierCatchesBrokenInvariants) {
  Graph g;
  int x = g.AddInput("x", {DType::kF32, {4}});
  int a = *g.AddOp1("test.relu", {x});
  int b = *g.AddOp1("test.exp", {a});
  g.AddOutput(b);
  ASSERT_TRUE(Verify(g).ok());
  {
    Graph h = g;  // use before def
    std::swap(h.mutable_nodes()[0], h.mutable_nodes()[1]);
    absl::Status s = Verify(h);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(std::string(s.message()).find("before it is defined"), std::string::npos) << s;
    // ... which the topological sort repairs.
    ASSERT_TRUE(h.SortTopologically().ok());
    EXPECT_TRUE(Verify(h).ok());
    EXPECT_EQ(PrintGraph(h), PrintGraph(g));
  }
  {
    Graph h = g;  // meta mismatch
    h.value(b).meta.shape = {5};
    EXPECT_FALSE(Verify(h).ok());
  }
  {
    Graph h = g;  // output that does not exist
    h.AddOutput(12345);
    EXPECT_FALSE(Verify(h).ok());
  }
  {
    Graph h = g;  // duplicate input names
    h.AddInput("x", {DType::kF32, {4}});
    EXPECT_FALSE(Verify(h).ok());
  }
}

TEST(GraphTest, TopologicalSortDetectsCycles) {
  Graph g;
  int x = g.AddInput("x", {DType::kF32, {4}});
  int a = *g.AddOp1("test.relu", {x});
  int b = *g.AddOp1("test.exp", {a});
  g.mutable_nodes()[0].inputs[0] = b;
  EXPECT_FALSE(g.SortTopologically().ok());
}

}  // namespace
}  // namespace loom::compiler::ir
