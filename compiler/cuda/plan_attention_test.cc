// attention_views: flash-eligible attention (bf16, D 64) reads and writes
// strided views, no copies around it; without the pass (or in f32) the copies
// stay.
#include "compiler/cuda/plan_attention.h"

#include <vector>

#include "compiler/cuda/plan_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

// q/k/v are windows of the qkv GEMM output, o is written [B, T, H, D], dout is
// a view of the upstream gradient and dq/dk/dv land in their windows of dqkv.
TEST(AttentionViews, GptReadsAndWritesStridedViews) {
  constexpr int kLayers = 2;
  constexpr int64_t B = 8, T = 64, C = 256, H = 4, D = 64;
  ir::Graph g = GptJoint(kLayers, C);
  PlanOptions copies;
  copies.attn_views = false;
  auto old = PlanCuda(g, true, copies);
  ASSERT_TRUE(old.ok()) << old.status();
  auto p = PlanCuda(g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*old, LaunchKind::kCopy, "slice+reshape+permute"), 3 * kLayers);
  EXPECT_EQ(CountOp(*old, LaunchKind::kCopy, "permute"), 2 * kLayers);
  EXPECT_EQ(CountOp(*old, LaunchKind::kConcat), kLayers);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "slice+reshape+permute"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kCopy, "permute"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kConcat), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpa, "sdpa(views)+permute"), kLayers);
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpaBackward, "sdpa_backward(views)+concat"), kLayers);
  EXPECT_EQ(old->launches.size() - p->launches.size(), 6u * kLayers) << "3 q/k/v copies, 2 permutes, 1 concat";
  EXPECT_LE(p->arena_bytes, old->arena_bytes);
  const std::vector<int64_t> qkv_st = {T * 3 * C, D, 3 * C, 1}, bthd = {T * C, D, C, 1};
  for (const Launch& l : p->launches) {
    if (l.kind == LaunchKind::kSdpa) {
      ASSERT_EQ(l.attn.size(), 4u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(l.attn[k].value, l.attn[0].value) << "q, k, v share the qkv GEMM output";
        EXPECT_EQ(l.attn[k].offset, k * C);
        EXPECT_EQ(l.attn[k].strides, qkv_st);
        EXPECT_EQ(l.attn[k].shape, (Shape{B, H, T, D}));
      }
      EXPECT_EQ(p->metas[l.attn[0].value].shape, (Shape{B, T, 3 * C}));
      EXPECT_EQ(l.attn[3].value, l.outputs[0]);
      EXPECT_EQ(l.attn[3].strides, bthd) << "o in [B, T, H, D] order";
      // The permute after it is an alias of o.
      bool alias = false;
      for (int v = 0; v < static_cast<int>(g.values().size()); ++v)
        alias |= v != l.outputs[0] && p->root[v] == l.outputs[0] && g.meta(v).shape == (Shape{B, T, H, D});
      EXPECT_TRUE(alias);
    }
    if (l.kind == LaunchKind::kSdpaBackward) {
      ASSERT_EQ(l.attn.size(), 8u);
      EXPECT_EQ(l.attn[0].strides, bthd) << "dout: a view of the projection's input gradient";
      EXPECT_EQ(l.attn[0].offset, 0);
      EXPECT_EQ(l.attn[4].strides, bthd) << "o as the forward wrote it";
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(l.attn[1 + k].strides, qkv_st);
        EXPECT_EQ(l.attn[1 + k].offset, k * C);
        EXPECT_EQ(l.attn[5 + k].value, l.outputs[0]) << "dq, dk, dv in one dqkv buffer";
        EXPECT_EQ(l.attn[5 + k].offset, k * C);
        EXPECT_EQ(l.attn[5 + k].strides, qkv_st);
      }
      EXPECT_EQ(p->metas[l.outputs[0]].shape, (Shape{B, T, 3 * C}));
    }
  }
  // f32 keeps the copies (the math attention kernel takes contiguous tensors).
  auto f = PlanCuda(g, false);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(CountOp(*f, LaunchKind::kCopy, "slice+reshape+permute"), 3 * kLayers);
  for (const Launch& l : f->launches) EXPECT_TRUE(l.attn.empty());
  // D 32 (d_model 128, 4 heads) is no flash shape: no views either.
  auto d32 = PlanCuda(GptJoint(kLayers, 128), true);
  ASSERT_TRUE(d32.ok()) << d32.status();
  for (const Launch& l : d32->launches) EXPECT_TRUE(l.attn.empty()) << l.op;
}

// Without compose_copies the q/k/v chains are no single view and dq/dk/dv are
// not written into the concat; the gradients go back to contiguous outputs.
TEST(AttentionViews, WithoutComposedCopies) {
  ir::Graph g = GptJoint(1, 256);
  PlanOptions o;
  o.compose_copies = false;
  auto p = PlanCuda(g, true, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpaBackward, "sdpa_backward(views)+concat"), 0);
  EXPECT_EQ(CountOp(*p, LaunchKind::kConcat), 1);
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpa), 1);
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpaBackward), 1);
}

// llama (GQA, rope between the projections and attention), D 64: every
// attention launch takes views; dq/dk/dv feed rope through permutes, which
// become aliases of gradients written in [B, T, H, D] order.
TEST(AttentionViews, LlamaGqa) {
  ir::Graph g = LlamaJoint(256);
  auto p = PlanCuda(g, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(CountOp(*p, LaunchKind::kSdpa) + CountOp(*p, LaunchKind::kSdpaBackward), 2);
  for (const Launch& l : p->launches) {
    if (l.kind == LaunchKind::kSdpa || l.kind == LaunchKind::kSdpaBackward) {
      EXPECT_EQ(l.attn.size(), l.kind == LaunchKind::kSdpa ? 4u : 8u) << l.op;
    }
  }
}

TEST(AttentionViews, FlashLayoutRules) {
  using plan_internal::FlashStridesOk;
  EXPECT_TRUE(FlashStridesOk(0, {64 * 768 * 3, 64, 768 * 3, 1}, 64));
  EXPECT_TRUE(FlashStridesOk(256, {64 * 768 * 3, 64, 768 * 3, 1}, 64));
  EXPECT_FALSE(FlashStridesOk(4, {64 * 768 * 3, 64, 768 * 3, 1}, 64)) << "rows 16-byte aligned";
  EXPECT_FALSE(FlashStridesOk(0, {64 * 768 * 3, 64, 768 * 3, 2}, 64)) << "unit last stride";
  EXPECT_FALSE(FlashStridesOk(0, {64 * 768 * 3, 64, 32, 1}, 64)) << "rows may not overlap";
  EXPECT_FALSE(FlashStridesOk(0, {64, 12, 768, 1}, 64)) << "strides multiples of 8";
}

}  // namespace
}  // namespace loom::compiler::cuda
