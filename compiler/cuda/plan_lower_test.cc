// lower_nodes: one launch per uncovered node, aliases, in-place AdamW, bf16
// shadows, and unsupported ops named.
#include "compiler/cuda/plan_lower.h"

#include <string>
#include <vector>

#include "compiler/cuda/plan_state.h"
#include "compiler/cuda/plan_test_util.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(LowerNodes, ReshapeIsAnAliasAndUpdatesAreInPlace) {
  ir::Graph g = GptJoint(1);
  auto p = PlanCuda(g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  int reshapes = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op == "reshape") {
      ++reshapes;
      EXPECT_EQ(p->root[n.outputs[0]], p->root[n.inputs[0]]);
    }
    if (n.op == "adamw") {
      EXPECT_EQ(p->root[n.outputs[0]], n.inputs[0]);
      EXPECT_EQ(p->root[n.outputs[1]], n.inputs[2]);
      EXPECT_EQ(p->root[n.outputs[2]], n.inputs[3]);
    }
  }
  EXPECT_GT(reshapes, 4);
  for (const Launch& l : p->launches) EXPECT_NE(l.op, "reshape");
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopyBack), 0) << "every update is in place";
}

// want(v, bf16) of an f32 value whose launch can write it in bf16 too
// (bf16_copy_at, the f32 residual stream's norm backward): the copy joins
// that launch's outputs once, a reshape of v reads it through a view of the
// same bytes, and no cast is launched; once another launch has written v's
// buffer again, the copy would be stale, so v is cast.
TEST(PlanState, Bf16CopyOnlyWhileTheValueIsUnchanged) {
  ir::Graph g = GptJoint(1);
  PlanOptions o;
  plan_internal::PlanState s(g, true, o);
  auto passes = plan_internal::PlanPipeline(o);
  ASSERT_EQ(passes.front()->name(), "storage_dtypes");
  ASSERT_TRUE(passes.front()->Run(s).ok());
  const int v = s.new_value({DType::kF32, {4, 8}});
  Launch w;
  w.kind = LaunchKind::kRmsNormBackward;
  w.outputs = {v};
  s.bf16_copy_at[v] = static_cast<int>(s.p.launches.size());
  s.p.launches.push_back(w);
  const int c = s.want(v, DType::kBF16);
  EXPECT_EQ(s.p.launches[0].outputs, (std::vector<int>{v, c}));
  EXPECT_EQ(s.p.metas[c].dtype, DType::kBF16);
  EXPECT_EQ(s.want(v, DType::kBF16), c) << "one copy";
  const int reshaped = s.new_value({DType::kF32, {32}});
  s.p.root[reshaped] = v;
  const int view = s.want(reshaped, DType::kBF16);
  EXPECT_EQ(s.p.root[view], c);
  EXPECT_EQ(s.p.metas[view].shape, (Shape{32}));
  EXPECT_EQ(s.p.metas[view].dtype, DType::kBF16);
  EXPECT_EQ(s.p.launches.size(), 1u) << "no cast";
  EXPECT_EQ(s.p.launches[0].outputs.size(), 2u);
  Launch again;  // accumulates into v
  again.outputs = {v};
  s.p.launches.push_back(again);
  const int cast = s.want(v, DType::kBF16);
  EXPECT_NE(cast, c);
  ASSERT_EQ(s.p.launches.size(), 3u);
  EXPECT_EQ(s.p.launches.back().op, "cast");
  EXPECT_EQ(s.p.launches.back().inputs, (std::vector<int>{v}));
}

// Every optional fusion pass off: one launch per node that is not a reshape
// or an adamw (those: one launch for all), except the nodes the GEMM
// epilogues fold in (gemm_epilogues is not optional), plus the casts.
TEST(LowerNodes, OneLaunchPerNodeWithoutFusions) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = GptJoint(1);
    auto p = PlanCuda(g, bf16, NoFusions());
    ASSERT_TRUE(p.ok()) << p.status();
    int nodes = 0, matmuls = 0;
    for (const ir::Node& n : g.nodes()) {
      nodes += n.op != "reshape" && n.op != "adamw";
      matmuls += n.op == "matmul";
    }
    int folded = 0, casts = 0;
    for (const Launch& l : p->launches) {
      if (l.kind == LaunchKind::kAdamW) continue;
      if (l.node < 0) {
        ++casts;
        continue;
      }
      folded += static_cast<int>(l.nodes.size()) - 1;
      if (l.kind == LaunchKind::kGemm) continue;
      EXPECT_EQ(l.nodes.size(), 1u) << l.op;
      EXPECT_EQ(g.nodes()[l.node].op, l.op) << "no fused op names";
    }
    if (bf16)
      EXPECT_GT(folded, 0) << "the bias / gelu / dgelu epilogues";
    else
      EXPECT_EQ(folded, 0) << "f32 plans take no GEMM epilogue";
    EXPECT_EQ(static_cast<int>(p->launches.size()), nodes - folded + 1 + casts) << p->Describe();
    EXPECT_EQ(CountOp(*p, LaunchKind::kAdamW), 1);
    EXPECT_EQ(CountOp(*p, LaunchKind::kGemm), matmuls);
  }
}

// PlanOptions::deterministic: the embedding gradient is the sorted launch (no
// atomics), in both precisions, with the same operands as the atomic one;
// nothing else changes.
TEST(LowerNodes, DeterministicPicksTheSortedEmbeddingBackward) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = GptJoint(1);
    auto fast = PlanCuda(g, bf16);
    ASSERT_TRUE(fast.ok()) << fast.status();
    PlanOptions o;
    o.deterministic = true;
    auto det = PlanCuda(g, bf16, o);
    ASSERT_TRUE(det.ok()) << det.status();
    EXPECT_EQ(CountOp(*fast, LaunchKind::kEmbeddingBackward), 1) << "wte (wpe: a column sum)";
    EXPECT_EQ(CountOp(*fast, LaunchKind::kEmbeddingBackwardSorted), 0);
    EXPECT_EQ(CountOp(*det, LaunchKind::kEmbeddingBackward), 0) << det->Describe();
    EXPECT_EQ(CountOp(*det, LaunchKind::kEmbeddingBackwardSorted), 1);
    ASSERT_EQ(fast->launches.size(), det->launches.size());
    for (size_t i = 0; i < det->launches.size(); ++i) {
      const Launch &a = fast->launches[i], &b = det->launches[i];
      EXPECT_EQ(a.inputs, b.inputs) << i;
      EXPECT_EQ(a.outputs, b.outputs) << i;
      if (a.kind == LaunchKind::kEmbeddingBackward) EXPECT_EQ(b.kind, LaunchKind::kEmbeddingBackwardSorted);
      else EXPECT_EQ(a.kind, b.kind) << i;
    }
    EXPECT_NE(det->Describe().find("embedding_backward_sorted embedding_backward"), std::string::npos)
        << det->Describe();
  }
}

// PlanOptions::sorted_embedding_backward alone: the same plan as
// deterministic's, launch for launch.
TEST(LowerNodes, SortedEmbeddingBackwardAlone) {
  ir::Graph g = GptJoint(1);
  PlanOptions det, sorted;
  det.deterministic = true;
  sorted.sorted_embedding_backward = true;
  auto a = PlanCuda(g, true, det), b = PlanCuda(g, true, sorted);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(CountOp(*b, LaunchKind::kEmbeddingBackwardSorted), 1) << b->Describe();
  EXPECT_EQ(a->Describe(), b->Describe());
}

TEST(LowerNodes, Bf16ShadowsOfGemmParameters) {
  ir::Graph g = GptJoint(2);
  auto p = PlanCuda(g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  int shadows = 0;
  for (int s : p->shadow) shadows += s >= 0;
  // wte (tied) + per layer: 4 GEMM weights, the c_attn and c_fc biases (the
  // c_proj biases go through the fused residual add, in f32).
  EXPECT_EQ(shadows, 1 + 2 * 6);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "cast"), 0) << "bias gradients are f32 column sums: no casts";
  auto f = PlanCuda(g, false);
  ASSERT_TRUE(f.ok()) << f.status();
  for (int s : f->shadow) EXPECT_LT(s, 0) << "no shadows in f32";
}

TEST(LowerNodes, UnsupportedOpIsNamed) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[4, 8]) {
  %0 = softmax(%x) : f32[4, 8]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(p.status().message()).find("softmax"), std::string::npos) << p.status();
  EXPECT_NE(std::string(p.status().message()).find("node 0"), std::string::npos) << p.status();
}

// A node of an imported model names its source node too (ir::Node::origin).
TEST(LowerNodes, UnsupportedNamesTheSourceNode) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[4, 8]) {
  %0 = softmax(%x) {axis=-1} : f32[4, 8]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  g->mutable_nodes()[0].origin = "ONNX node '/attn/Softmax' (Softmax, opset 14)";
  auto p = PlanCuda(*g, false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(p.status().message(),
            "cuda lowering: op 'softmax' (node 0, from ONNX node '/attn/Softmax' (Softmax, opset 14)): no CUDA launch "
            "for this op")
      << p.status();
}

TEST(LowerNodes, F64IsUnsupported) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f64[4, 8]) {
  %0 = exp(%x) : f64[4, 8]
  return %0
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(p.status().message()).find("f64"), std::string::npos) << p.status();
}

TEST(LowerNodes, SumAndMaxOverTrailingAxesAreRowReductions) {
  auto g = ir::ParseGraph(R"IR(graph @g(%x: f32[6, 10]) {
  %0 = max(%x) {axes=[1], keepdim=true} : f32[6, 1]
  %1 = sum(%x) {axes=[-1]} : f32[6]
  %2 = sum(%x) : f32[]
  return %0, %1, %2
}
)IR");
  ASSERT_TRUE(g.ok()) << g.status();
  auto p = PlanCuda(*g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->launches.size(), 3u) << p->Describe();
  for (const Launch& l : p->launches) EXPECT_EQ(l.kind, LaunchKind::kRowReduce) << p->Describe();
  EXPECT_EQ(p->launches[0].op, "max");
  for (int v : {1, 2}) EXPECT_EQ(p->metas[v].dtype, DType::kF32) << "row statistics stay f32 under bf16";
  auto lead = ir::ParseGraph(R"IR(graph @g(%x: f32[6, 10]) {
  %0 = sum(%x) {axes=[0]} : f32[10]
  return %0
}
)IR");
  ASSERT_TRUE(lead.ok()) << lead.status();
  auto q = PlanCuda(*lead, false);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(std::string(q.status().message()).find("trailing axes"), std::string::npos) << q.status();
}

}  // namespace
}  // namespace loom::compiler::cuda
