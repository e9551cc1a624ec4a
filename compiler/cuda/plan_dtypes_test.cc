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

}  // namespace
}  // namespace loom::compiler::cuda
