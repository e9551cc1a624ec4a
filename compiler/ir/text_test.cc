#include "compiler/ir/text.h"

#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace loom::compiler::ir {
namespace {

constexpr char kText[] = R"IR(graph @mlp(%x: f32[4, 8], %w: f32[8, 16] param, %b: f32[16] @"R" state) {
  %0 = test.matmul(%x, %w) {trans_a=false, trans_b=false} : f32[4, 16]
  %1 = test.add(%0, %b) compute=bf16 : f32[4, 16] @"S(0)"
  %2, %3 = test.dup(%1) : f32[4, 16], f32[4, 16]
  %4 = test.scale(%3) {s=-0.5} : f32[4, 16]
  %5 = test.sum_to(%4) {shape=[16]} : f32[16]
  %6 = test.fill() {dtype="f32", shape=[], value=1.0000000000000001e-05} : f32[]
  %7 = fused(%2, %b) : f32[4, 16] graph @fused_0(%a: f32[4, 16], %c: f32[16]) {
    %0 = test.add(%a, %c) : f32[4, 16]
    %1 = test.relu(%0) : f32[4, 16]
    return %1
  }
  return %7, %5 -> %b, %6
}
)IR";

TEST(TextTest, RoundTripsExactly) {
  auto g = ParseGraph(kText);
  ASSERT_TRUE(g.ok()) << g.status();
  std::string printed = PrintGraph(*g);
  EXPECT_EQ(printed, kText);
  auto g2 = ParseGraph(printed);
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_EQ(PrintGraph(*g2), printed);
  EXPECT_EQ(g->inputs()[1].kind, InputKind::kParam);
  EXPECT_EQ(g->inputs()[2].kind, InputKind::kState);
  EXPECT_EQ(g->value(g->inputs()[2].value).placement, "R");
  EXPECT_EQ(*g->nodes()[1].compute_dtype, DType::kBF16);
  EXPECT_EQ(g->outputs()[1].updates, 2);
  EXPECT_DOUBLE_EQ(g->nodes()[3].attrs.GetFloat("s"), -0.5);
}

TEST(TextTest, AcceptsFreeNamesCommentsAndRenumbers) {
  auto g = ParseGraph(R"IR(
    # a comment
    graph @g(%in: f64[3]) {
      %h = test.relu(%in) : f64[3]   # trailing comment
      %out = test.exp(%h) : f64[3]
      return %out
    })IR");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(*g), R"IR(graph @g(%in: f64[3]) {
  %0 = test.relu(%in) : f64[3]
  %1 = test.exp(%0) : f64[3]
  return %1
}
)IR");
}

TEST(TextTest, RoundTripsSpecialFloatsAndEmptyLists) {
  std::string t = R"IR(graph @g(%x: f32[2, 3]) {
  %0 = test.scale(%x) {s=inf} : f32[2, 3]
  %1 = test.scale(%0) {s=-inf} : f32[2, 3]
  %2 = test.scale(%1) {s=1.0000000000000001e+300} : f32[2, 3]
  %3 = test.scale(%2) {s=2, z=[]} : f32[2, 3]
  return %3
}
)IR";
  auto g = ParseGraph(t);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(*g), t);
}

void ExpectError(const std::string& text, const std::string& where, const std::string& what) {
  auto g = ParseGraph(text);
  ASSERT_FALSE(g.ok()) << text;
  std::string msg(g.status().message());
  EXPECT_NE(msg.find(where), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TextTest, RoundTripsConstInputsAndQuotedNames) {
  const std::string t = R"IR(graph @g(%x: f32[2, 3], %"onnx::Mul_7": f32[3] const, %"w/0:1": f32[3] param) {
  %0 = test.add(%x, %"onnx::Mul_7") : f32[2, 3]
  %1 = test.add(%0, %"w/0:1") : f32[2, 3]
  %2 = test.sum_to(%1) {shape=[3]} : f32[3]
  return %1, %2 -> %"w/0:1"
}
)IR";
  auto g = ParseGraph(t);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->inputs()[1].kind, InputKind::kConst);
  EXPECT_EQ(g->inputs()[1].name, "onnx::Mul_7");
  EXPECT_EQ(g->inputs()[2].name, "w/0:1");
  EXPECT_EQ(PrintGraph(*g), t);
  ExpectError("graph @g(%\"x: f32[2]) {\n  return\n}", "line 1", "unterminated quoted name");
}

TEST(TextTest, ErrorsNameLineAndColumn) {
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = test.relu(%y) : f32[3]\n  return %0\n}", "line 2, column 18",
              "undefined value %y");
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = test.relu(%x) : f32[4]\n  return %0\n}", "line 2, column 3",
              "inference gives f32[3]");
  ExpectError("graph @g(%x: q32[3]) {\n  return %x\n}", "line 1, column 14", "unknown dtype");
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = nope(%x) : f32[3]\n  return %0\n}", "line 2, column 8",
              "unknown op 'nope'");
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = test.relu(%x) f32[3]\n  return %0\n}", "line 2, column 22",
              "expected ':'");
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = test.relu(%x) : f32[3]\n", "line 3, column 1", "end of input");
  ExpectError("graph @g(%x: f32[3], %x: f32[3]) {\n  return %x\n}", "line 1, column 22", "duplicate name");
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = test.scale(%x) {s=1, s=2} : f32[3]\n  return %0\n}",
              "line 2, column 29", "duplicate attribute");
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = test.add(%x, %x) : f32[3]\n  return %0 -> %q\n}", "line 3, column 16",
              "not an input");
  ExpectError("graph @g(%x: f32[3]) {\n  return %x $\n}", "line 2, column 13", "unexpected character");
  ExpectError("graph @g(%x: f32[3]) {\n  %0 = test.add(%x) : f32[3]\n  return %0\n}", "line 2, column 8",
              "expected 2 inputs");
}

}  // namespace
}  // namespace loom::compiler::ir

namespace loom::compiler::ir {
namespace {

// Bad text never crashes the parser: every prefix, and many random edits, of a
// valid program either parse or return InvalidArgument.
TEST(TextTest, NeverCrashesOnMangledInput) {
  const std::string good = kText;
  for (size_t n = 0; n + 1 < good.size(); ++n) {  // (all but the final newline)
    auto g = ParseGraph(good.substr(0, n));
    EXPECT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  }
  uint64_t seed = 12345;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  const std::string alphabet = "%@(){}[],:=-># \n\"0123456789.eafgraphreturnfusedtest.adde-";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string t = good;
    int edits = 1 + next() % 4;
    for (int e = 0; e < edits; ++e) {
      size_t pos = (next() >> 11) % t.size();
      switch ((next() >> 7) % 3) {
        case 0: t[pos] = alphabet[(next() >> 5) % alphabet.size()]; break;
        case 1: t.erase(pos, 1 + (next() >> 9) % 5); break;
        case 2: t.insert(pos, 1, alphabet[(next() >> 5) % alphabet.size()]); break;
      }
      if (t.empty()) t = "x";
    }
    auto g = ParseGraph(t);
    if (g.ok()) {
      EXPECT_EQ(PrintGraph(*ParseGraph(PrintGraph(*g))), PrintGraph(*g));
    } else {
      EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
    }
  }
}

TEST(TextTest, RejectsHugeShapesAndDeepNesting) {
  ExpectError("graph @g(%x: f32[100000000, 100000000]) {\n  return %x\n}", "line 1, column 29", "too large");
  std::string deep = "graph @g(%x: f32[1]) {\n";
  for (int i = 0; i < 40; ++i) deep += "%0 = fused(%x) : f32[1] graph @f(%x: f32[1]) {\n";
  auto g = ParseGraph(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(std::string(g.status().message()).find("nested too deeply"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace loom::compiler::ir
