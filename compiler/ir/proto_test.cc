#include "compiler/ir/proto.h"

#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::ir {
namespace {

constexpr char kText[] = R"IR(graph @mlp(%x: f32[4, 8], %w: f32[8, 16] param, %b: f32[16] @"R" state) {
  %0 = test.matmul(%x, %w) {trans_a=false, trans_b=true} : f32[4, 16]
  %1 = test.add(%0, %b) compute=bf16 : f32[4, 16] @"S(0)"
  %2, %3 = test.dup(%1) : f32[4, 16], f32[4, 16]
  %4 = test.scale(%3) {s=-0.5} : f32[4, 16]
  %5 = test.sum_to(%4) {shape=[16]} : f32[16]
  %6 = test.fill() {dtype="f32", shape=[], value=3} : f32[]
  %7 = fused(%2, %b) : f32[4, 16] graph @fused_0(%a: f32[4, 16], %c: f32[16]) {
    %0 = test.add(%a, %c) : f32[4, 16]
    %1 = test.relu(%0) : f32[4, 16]
    return %1
  }
  return %7, %5 -> %b, %6
}
)IR";

TEST(ProtoTest, RoundTrips) {
  // trans_b=true with an [8, 16] w is invalid: fix the text to a valid graph.
  std::string text = kText;
  text.replace(text.find("trans_b=true"), 12, "trans_b=false");
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  loom::v1::GraphDef def = GraphToProto(*g);
  std::string bytes;
  ASSERT_TRUE(def.SerializeToString(&bytes));
  loom::v1::GraphDef parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  auto back = GraphFromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PrintGraph(*back), text);
  EXPECT_EQ(def.nodes(0).inputs(1), 1);  // %w is value 1
  EXPECT_EQ(def.outputs(1).updates(), 2);
}

TEST(ProtoTest, RoundTripsConstInputsAndQuotedNames) {
  const std::string text = R"IR(graph @g(%x: f32[2, 3], %"onnx::Mul_7": f32[3] const) {
  %0 = test.add(%x, %"onnx::Mul_7") : f32[2, 3]
  return %0
}
)IR";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  loom::v1::GraphDef def = GraphToProto(*g);
  EXPECT_EQ(def.inputs(1).kind(), loom::v1::GraphInputDef::CONST);
  auto back = GraphFromProto(def);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PrintGraph(*back), text);
}

TEST(ProtoTest, RejectsBadDefinitions) {
  auto g = ParseGraph("graph @g(%x: f32[3]) {\n  %0 = test.relu(%x) : f32[3]\n  return %0\n}");
  ASSERT_TRUE(g.ok());
  loom::v1::GraphDef def = GraphToProto(*g);
  {
    auto d = def;
    d.mutable_nodes(0)->set_inputs(0, 7);
    auto r = GraphFromProto(d);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(std::string(r.status().message()).find("node 0 (test.relu)"), std::string::npos) << r.status();
  }
  {
    auto d = def;
    d.mutable_nodes(0)->mutable_outputs(0)->set_dtype("f99");
    EXPECT_FALSE(GraphFromProto(d).ok());
  }
  {
    auto d = def;
    d.mutable_nodes(0)->mutable_outputs(0)->add_shape(2);  // meta mismatch: verifier
    EXPECT_FALSE(GraphFromProto(d).ok());
  }
  {
    auto d = def;
    d.mutable_outputs(0)->set_value(9);
    EXPECT_FALSE(GraphFromProto(d).ok());
  }
}

}  // namespace
}  // namespace loom::compiler::ir
