// PointwiseBodyOf: IR graphs -> the pointwise generator's PwBody, checked by
// structure, by the generated source, and over every fused node of a compiled
// GPT training step.
#include "compiler/cuda/pointwise_body.h"

#include <string>

#include "absl/strings/match.h"
#include "compiler/compile.h"
#include "compiler/models/models.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

namespace cg = ::loom::kernels::cuda::codegen;

TEST(PointwiseBody, FusedChainKeepsOrderAndOperands) {
  ir::Graph g("fused_0");
  const ir::TensorMeta m{DType::kF32, {4, 8}};
  const int x = g.AddInput("x", m), b = g.AddInput("b", m), w = g.AddInput("w", m);
  const int s = *g.AddOp1("add", {x, b});
  const int ge = *g.AddOp1("gelu", {s}, ir::Attrs{{"approximate", std::string("tanh")}});
  const int y = *g.AddOp1("mul", {w, ge});
  g.AddOutput(y);
  auto body = PointwiseBodyOf(g);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(body->num_inputs, 3);
  ASSERT_EQ(body->nodes.size(), 3u);
  EXPECT_EQ(body->nodes[0].op, "add");
  EXPECT_EQ(body->nodes[0].inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(body->nodes[1].inputs, (std::vector<int>{3}));
  EXPECT_EQ(body->nodes[1].attrs.GetString("approximate"), "tanh");
  EXPECT_EQ(body->nodes[2].inputs, (std::vector<int>{2, 4})) << "w first, as the node reads it";
  EXPECT_EQ(body->output, 5);
  cg::PwSpec spec;
  spec.body = &*body;
  spec.out_shape = {4, 8};
  for (int k = 0; k < 3; ++k) spec.inputs.push_back({DType::kF32, {8, 1}});
  auto gen = cg::GeneratePointwiseSource(spec);
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_TRUE(absl::StrContains(gen->source, "const float t2 = x2 * t1;")) << gen->source;
  EXPECT_TRUE(absl::StrContains(gen->source, "add{} -> gelu{approximate=\"tanh\"} -> mul{}")) << gen->source;
}

TEST(PointwiseBody, IdentityAndSingleOps) {
  ir::Graph id("copy");
  id.AddOutput(id.AddInput("x", {DType::kBF16, {3}}));
  auto copy = PointwiseBodyOf(id);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(copy->nodes.empty());
  EXPECT_EQ(copy->output, 0);

  ir::Graph g("g");
  const int a = g.AddInput("a", {DType::kF32, {3}}), c = g.AddInput("c", {DType::kF32, {3}});
  g.AddOutput(*g.AddOp1("sub", {c, a}));
  auto one = PointwiseBodyOf(g, 0);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->nodes.size(), 1u);
  EXPECT_EQ(one->nodes[0].op, "sub");
  EXPECT_EQ(one->nodes[0].inputs, (std::vector<int>{0, 1})) << "a node's operands in its own order";
  EXPECT_EQ(one->output, 2);
}

TEST(PointwiseBody, BadBodiesNameTheNode) {
  ir::Graph two("two");
  const int x = two.AddInput("x", {DType::kF32, {2}});
  const int y = *two.AddOp1("exp", {x});
  two.AddOutput(y);
  two.AddOutput(x);
  auto e = PointwiseBodyOf(two);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.status().message(), "expected 1 output, got 2")) << e.status();

  ir::Graph multi("multi");
  const int v = multi.AddInput("v", {DType::kF32, {4, 8}});
  const int w = multi.AddInput("w", {DType::kF32, {8}});
  const int bb = multi.AddInput("b", {DType::kF32, {8}});
  auto outs = multi.AddOp("layernorm", {v, w, bb}, ir::Attrs{{"eps", 1e-5}});
  ASSERT_TRUE(outs.ok()) << outs.status();
  multi.AddOutput((*outs)[0]);
  e = PointwiseBodyOf(multi);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(absl::StrContains(e.status().message(), "node 0 (layernorm): expected 1 output, got 3")) << e.status();
}

// Every fused node of a compiled GPT training step converts and generates.
TEST(PointwiseBody, EveryFusedNodeOfAGptStepGenerates) {
  v1::ModelSpec spec;
  spec.set_family("gpt");
  spec.set_n_layer(1);
  spec.set_n_head(4);
  spec.set_d_model(128);
  spec.set_seq_len(64);
  spec.set_vocab(256);
  models::BuildOptions bo;
  bo.batch = 2;
  auto fwd = models::BuildForward(spec, bo);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  CompileOptions co;
  co.adamw = AdamWOptions{};
  co.lower = false;
  auto c = Compile(*fwd, co);
  ASSERT_TRUE(c.ok()) << c.status();
  const ir::Graph& g = c->stages.at("fused");
  int fused = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = g.nodes()[i];
    if (n.op != ir::kFusedOp) continue;
    ++fused;
    auto body = PointwiseBodyOf(g, static_cast<int>(i));
    ASSERT_TRUE(body.ok()) << body.status();
    EXPECT_EQ(body->num_inputs, static_cast<int>(n.inputs.size()));
    EXPECT_EQ(body->nodes.size(), n.subgraph->nodes().size());
    cg::PwSpec ps;
    ps.body = &*body;
    const Shape& os = g.meta(n.outputs[0]).shape;
    ps.out_shape.assign(os.begin(), os.end());
    for (int v : n.inputs) ps.inputs.push_back({g.meta(v).dtype, cg::BroadcastStrides(g.meta(v).shape, os)});
    ps.out_dtype = g.meta(n.outputs[0]).dtype;
    auto gen = cg::GeneratePointwiseSource(ps);
    EXPECT_TRUE(gen.ok()) << "node " << i << ": " << gen.status();
  }
  EXPECT_GE(fused, 2);  // each layer's projection bias + residual adds
}

}  // namespace
}  // namespace loom::compiler::cuda
