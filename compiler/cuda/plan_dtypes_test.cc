// storage_dtypes: the mixed-precision policy on the gpt-small joint graph.
#include "compiler/cuda/plan_dtypes.h"

#include <map>
#include <string>

#include "compiler/cuda/plan_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(StorageDTypes, F32KeepsGraphDTypes) {
  ir::Graph g = GptJoint();
  std::vector<DType> st = StorageDTypes(g, false);
  for (size_t v = 0; v < st.size(); ++v) EXPECT_EQ(st[v], g.meta(v).dtype);
}

TEST(StorageDTypes, Bf16Policy) {
  ir::Graph g = GptJoint();
  std::vector<DType> st = StorageDTypes(g, true);
  for (const ir::GraphInput& in : g.inputs()) EXPECT_EQ(st[in.value], g.meta(in.value).dtype) << in.name;
  std::map<std::string, int> seen;
  for (const ir::Node& n : g.nodes()) {
    ++seen[n.op];
    auto dt = [&](int k) { return st[n.outputs[k]]; };
    if (n.op == "embedding" || n.op == "gelu" || n.op == "sdpa_backward" || n.op == "cross_entropy_backward" ||
        n.op == "permute" || n.op == "slice" || n.op == "slice_backward") {
      EXPECT_EQ(dt(0), DType::kBF16) << n.op;
    } else if (n.op == "layernorm" || n.op == "layernorm_backward") {
      EXPECT_EQ(dt(0), DType::kBF16);
      EXPECT_EQ(dt(1), DType::kF32);
      EXPECT_EQ(dt(2), DType::kF32);
    } else if (n.op == "sdpa") {
      EXPECT_EQ(dt(0), DType::kBF16);
      EXPECT_EQ(dt(1), DType::kF32);
    } else if (n.op == "cross_entropy" || n.op == "grad_norm" || n.op == "embedding_backward") {
      for (size_t k = 0; k < n.outputs.size(); ++k) EXPECT_EQ(dt(k), DType::kF32) << n.op;
    } else if (n.op == "adamw") {
      EXPECT_EQ(st[n.inputs[1]], DType::kF32) << "parameter gradients stay f32";
      for (size_t k = 0; k < 3; ++k) EXPECT_EQ(dt(k), DType::kF32);
    } else if (n.op == "fill") {
      EXPECT_EQ(dt(0), DType::kF32) << "scalars stay f32";
    } else if (n.op == "reshape") {
      EXPECT_EQ(dt(0), st[n.inputs[0]]) << "a reshape keeps its input's dtype";
    }
  }
  EXPECT_GT(seen["adamw"], 10);
  EXPECT_EQ(seen["sdpa"], 2);
}

// The pass fills the plan's metas from the policy (the graph's shapes, the
// storage dtypes) and reports a change only when bf16 changed anything.
TEST(StorageDTypesPass, FillsThePlanMetas) {
  ir::Graph g = GptJoint(1);
  for (bool bf16 : {false, true}) {
    PlanOptions o;
    plan_internal::PlanState s(g, bf16, o);
    plan_internal::StorageDTypesPass pass;
    auto changed = pass.Run(s);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(*changed, bf16);
    const std::vector<DType> st = StorageDTypes(g, bf16);
    ASSERT_EQ(s.p.metas.size(), g.values().size());
    for (size_t v = 0; v < st.size(); ++v) {
      EXPECT_EQ(s.p.metas[v].dtype, st[v]);
      EXPECT_EQ(s.p.metas[v].shape, g.meta(v).shape);
    }
    EXPECT_EQ(s.attn_views, bf16) << "strided attention operands are a bf16 (flash) matter";
  }
}

// The lean memory policy: AdamW's m and v (inputs and updates) bf16, the
// parameter gradients bf16 where a GEMM or an add makes them, parameters f32.
TEST(StorageDTypes, LeanPolicyStoresStatesAndGradientsBf16) {
  ir::Graph g = LlamaJoint(64, 2);
  MemoryPolicy lean{true, true, true};
  std::vector<DType> st = StorageDTypes(g, true, lean);
  const std::vector<int> prod = plan_internal::Producers(g);
  int states = 0, bf16_grads = 0, f32_grads = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != "adamw") continue;
    EXPECT_EQ(st[n.inputs[0]], DType::kF32) << "parameters stay f32";
    for (int k : {2, 3}) {
      EXPECT_EQ(st[n.inputs[k]], DType::kBF16);
      EXPECT_EQ(st[n.outputs[k - 1]], DType::kBF16) << "an update keeps its input's dtype";
      ++states;
    }
    EXPECT_EQ(st[n.outputs[0]], DType::kF32);
    const ir::Node& gp = g.nodes()[prod[n.inputs[1]]];
    const bool f32_op = gp.op == "embedding_backward" || gp.op == "rmsnorm_backward" || gp.op == "sum";
    EXPECT_EQ(st[n.inputs[1]], f32_op ? DType::kF32 : DType::kBF16) << gp.op;
    (f32_op ? f32_grads : bf16_grads)++;
  }
  EXPECT_GT(states, 20);
  EXPECT_GE(bf16_grads, 15);  // 7 matrices a layer, and the output head
  EXPECT_GE(f32_grads, 2);    // the embedding's and the norms' weights
  for (const ir::GraphOutput& o : g.outputs())
    if (o.updates >= 0) EXPECT_EQ(st[o.value], st[g.inputs()[o.updates].value]) << g.inputs()[o.updates].name;
}

TEST(StorageDTypesPass, TheMemoryPolicyNeedsABf16Plan) {
  ir::Graph g = LlamaJoint(64);
  PlanOptions o;
  o.memory.bf16_adam_states = true;
  auto p = PlanCuda(g, false, o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("bf16 plan"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace loom::compiler::cuda
