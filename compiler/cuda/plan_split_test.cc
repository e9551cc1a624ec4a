// split_master: which parameters the lean memory policy stores split.
#include "compiler/cuda/plan_split.h"

#include <string>
#include <vector>

#include "compiler/cuda/plan_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

PlanOptions Lean() {
  PlanOptions o;
  o.memory = MemoryPolicy{true, true, true};
  return o;
}

// Whether a launch other than the AdamW reads or writes graph input k's bytes.
bool TouchedOutsideAdamW(const ir::Graph& g, const CudaPlan& p, int k) {
  const int iv = g.inputs()[k].value;
  for (const Launch& l : p.launches) {
    if (l.kind == LaunchKind::kAdamW) continue;
    for (const std::vector<int>* vs : {&l.inputs, &l.outputs})
      for (int v : *vs)
        if (v >= 0 && p.root[v] == iv) return true;
    if (l.copy_back_input == k) return true;
  }
  return false;
}

// Every split parameter has a shadow and only the AdamW touches it; every
// shadowed parameter left plain has another reader. Returns the split names.
std::vector<std::string> CheckSplit(const ir::Graph& g, const CudaPlan& p) {
  std::vector<std::string> split;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const bool touched = TouchedOutsideAdamW(g, p, static_cast<int>(k));
    if (p.split[k]) {
      EXPECT_GE(p.shadow[k], 0) << g.inputs()[k].name;
      EXPECT_FALSE(touched) << g.inputs()[k].name;
      split.push_back(g.inputs()[k].name);
    } else if (p.shadow[k] >= 0) {
      EXPECT_TRUE(touched) << g.inputs()[k].name << " has a shadow, no other reader, and is not split";
    }
  }
  return split;
}

TEST(SplitMaster, LlamaSplitsEveryMatrixButTheEmbedding) {
  ir::Graph g = LlamaJoint(64, 2);
  auto p = PlanCuda(g, true, Lean());
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<std::string> split = CheckSplit(g, *p);
  EXPECT_EQ(split.size(), 2u * 7 + 1) << "q, k, v, o and the three MLP matrices a layer, and the output head";
  for (const std::string& n : split) EXPECT_EQ(n.find("embed"), std::string::npos) << n;
  EXPECT_TRUE(ArenaProblems(g, *p).empty());
}

TEST(SplitMaster, GptKeepsTheTiedEmbeddingPlain) {
  ir::Graph g = GptJoint(2);
  auto p = PlanCuda(g, true, Lean());
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<std::string> split = CheckSplit(g, *p);
  // The four matrices a block, and the biases only a GEMM epilogue reads
  // (through the shadow); wte is also the embedding's table.
  int weights = 0;
  for (const std::string& n : split) weights += n.find(".weight") != std::string::npos;
  EXPECT_EQ(weights, 2 * 4);
  for (size_t k = 0; k < g.inputs().size(); ++k)
    if (g.inputs()[k].name.find("wte") != std::string::npos) EXPECT_FALSE(p->split[k]);
}

TEST(SplitMaster, OffByDefaultAndWithoutTheOption) {
  ir::Graph g = LlamaJoint(64);
  PlanOptions states_only;
  states_only.memory.bf16_adam_states = true;
  for (const PlanOptions& o : {PlanOptions{}, states_only}) {
    auto p = PlanCuda(g, true, o);
    ASSERT_TRUE(p.ok()) << p.status();
    for (bool s : p->split) EXPECT_FALSE(s);
  }
}

}  // namespace
}  // namespace loom::compiler::cuda
