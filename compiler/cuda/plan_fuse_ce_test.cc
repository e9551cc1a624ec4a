// fuse_cross_entropy: cross_entropy + its backward as one launch at the
// backward's place, refused when a launch in between depends on the move.
#include "compiler/cuda/plan_fuse_ce.h"

#include <vector>

#include "compiler/cuda/plan_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

TEST(FuseCrossEntropy, OneLaunchAtTheBackwardsPlace) {
  for (bool bf16 : {false, true}) {
    ir::Graph g = GptJoint(2);
    PlanOptions off;
    off.fuse_cross_entropy = false;
    auto pu = PlanCuda(g, bf16, off);
    ASSERT_TRUE(pu.ok()) << pu.status();
    ASSERT_EQ(CountOp(*pu, LaunchKind::kCrossEntropy), 1);
    ASSERT_EQ(CountOp(*pu, LaunchKind::kCrossEntropyBackward), 1);
    const Launch* fw = nullptr;
    const Launch* bw = nullptr;
    size_t bpos = 0;
    for (size_t i = 0; i < pu->launches.size(); ++i) {
      if (pu->launches[i].kind == LaunchKind::kCrossEntropy) fw = &pu->launches[i];
      if (pu->launches[i].kind == LaunchKind::kCrossEntropyBackward) bw = &pu->launches[i], bpos = i;
    }
    auto p = PlanCuda(g, bf16);  // on by default
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(CountOp(*p, LaunchKind::kCrossEntropy), 0);
    EXPECT_EQ(CountOp(*p, LaunchKind::kCrossEntropyBackward), 0);
    ASSERT_EQ(CountOp(*p, LaunchKind::kCrossEntropyFused), 1);
    EXPECT_EQ(p->launches.size(), pu->launches.size() - 1);
    for (size_t i = 0; i < p->launches.size(); ++i) {
      const Launch& l = p->launches[i];
      if (l.kind != LaunchKind::kCrossEntropyFused) continue;
      // At the backward's place (one launch earlier: the forward is gone),
      // reading dloss, logits, targets and writing loss, lse, dlogits.
      EXPECT_EQ(i, bpos - 1);
      EXPECT_EQ(l.inputs, (std::vector<int>{bw->inputs[0], fw->inputs[0], fw->inputs[1]}));
      EXPECT_EQ(l.outputs, (std::vector<int>{fw->outputs[0], fw->outputs[1], bw->outputs[0]}));
      EXPECT_EQ(l.nodes.size(), fw->nodes.size() + bw->nodes.size());
    }
  }
}

// Not fused when a launch in between reads the forward's loss or writes the logits.
TEST(FuseCrossEntropy, RefusedWhenALaunchInBetweenDependsOnIt) {
  ir::Graph g = GptJoint(1);
  PlanOptions off;
  off.fuse_cross_entropy = false;
  auto p = PlanCuda(g, true, off);
  ASSERT_TRUE(p.ok()) << p.status();
  size_t f = 0, b = 0;
  for (size_t i = 0; i < p->launches.size(); ++i) {
    if (p->launches[i].kind == LaunchKind::kCrossEntropy) f = i;
    if (p->launches[i].kind == LaunchKind::kCrossEntropyBackward) b = i;
  }
  ASSERT_LT(f + 1, b);
  CudaPlan reads = *p;
  reads.launches[f + 1].inputs.push_back(reads.launches[f].outputs[0]);
  EXPECT_EQ(FuseCrossEntropy(reads), 0);
  CudaPlan writes = *p;
  writes.launches[f + 1].outputs.push_back(writes.launches[f].inputs[0]);
  EXPECT_EQ(FuseCrossEntropy(writes), 0);
  CudaPlan plain = *p;
  EXPECT_EQ(FuseCrossEntropy(plain), 1);
}

}  // namespace
}  // namespace loom::compiler::cuda
