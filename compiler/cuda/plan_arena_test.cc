// assign_arena: no two live buffers overlap, offsets aligned, the arena near
// the live-bytes bound, bf16 smaller.
#include "compiler/cuda/plan_arena.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "compiler/cuda/plan_test_util.h"
#include "gtest/gtest.h"

namespace loom::compiler::cuda {
namespace {

class ArenaIsConsistent : public ::testing::TestWithParam<int> {};

// d_model 128 (D 32) and 256 (D 64: strided flash operands, o aliased by its permute).
TEST_P(ArenaIsConsistent, NoLiveOverlap) {
  ir::Graph g = GptJoint(2, GetParam());
  int64_t bytes[2];
  for (bool bf16 : {false, true}) {
    auto p = PlanCuda(g, bf16);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GE(p->arena_bytes, p->live_bytes_bound);
    EXPECT_LE(p->arena_bytes, p->live_bytes_bound * 5 / 4);
    // Lifetimes: recompute and check no two live buffers overlap.
    EXPECT_EQ(ArenaProblems(g, *p), std::vector<std::string>{});
    bytes[bf16] = p->arena_bytes;
    std::printf("bf16=%d arena %lld bytes, live bound %lld\n", bf16, static_cast<long long>(p->arena_bytes),
                static_cast<long long>(p->live_bytes_bound));
  }
  EXPECT_LT(bytes[1], bytes[0] * 3 / 4) << "bf16 activations take less memory";
}
INSTANTIATE_TEST_SUITE_P(DModel, ArenaIsConsistent, ::testing::Values(128, 256));

// A deep llama with block activation checkpointing (the 6.74B comparison of
// docs/perf.md: C 4096, F 11008, 32 heads, T 2048, B 1; planning needs no
// device): every block's recompute and backward reuse the arena, and no two
// live buffers overlap at 16 or 32 layers, f32 and bf16, standard and lean.
TEST(ArenaIsConsistent, DeepLlamaWithBlockCheckpointing) {
  for (int layers : {16, 32}) {
    SCOPED_TRACE(testing::Message() << layers << " layers");
    v1::ModelSpec spec;
    spec.set_family("llama");
    spec.set_n_layer(layers);
    spec.set_n_head(32);
    spec.set_n_kv_head(32);
    spec.set_d_model(4096);
    spec.set_ffn_hidden(11008);
    spec.set_seq_len(2048);
    spec.set_vocab(32000);
    ir::Graph g = ModelJoint(spec, 1, /*checkpoint_blocks=*/true);
    PlanOptions lean;
    lean.memory = {true, true, true};
    for (int policy = 0; policy < 3; ++policy) {  // f32, bf16 standard, bf16 lean
      auto p = PlanCuda(g, policy > 0, policy == 2 ? lean : PlanOptions());
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(ArenaProblems(g, *p), std::vector<std::string>{}) << "policy " << policy;
    }
  }
}

// PlanOptions::guard_bytes: every arena buffer is followed by at least that
// many free bytes (rounded to the alignment) that no buffer live at the same
// time touches, listed with the buffer's first writer; the arena grows.
TEST(AssignArena, GuardsFollowEveryBufferAndNothingLiveTouchesThem) {
  ir::Graph g = GptJoint(2, 128);
  PlanOptions o;
  o.guard_bytes = 1000;  // rounds up to 1024
  auto plain = PlanCuda(g, true);
  auto guarded = PlanCuda(g, true, o);
  ASSERT_TRUE(plain.ok() && guarded.ok());
  EXPECT_TRUE(plain->guards.empty());
  EXPECT_GT(guarded->arena_bytes, plain->arena_bytes);
  EXPECT_EQ(ArenaProblems(g, *guarded), std::vector<std::string>{});
  const CudaPlan& p = *guarded;
  // Lifetimes as ArenaProblems takes them: first write to last read.
  std::vector<int> first(p.metas.size(), -1), last(p.metas.size(), -1);
  for (int pos = 0; pos < static_cast<int>(p.launches.size()); ++pos) {
    for (int v : p.launches[pos].outputs)
      if (p.root[v] >= 0 && first[p.root[v]] < 0) first[p.root[v]] = pos;
    for (int v : p.launches[pos].inputs)
      if (p.root[v] >= 0) last[p.root[v]] = std::max(last[p.root[v]], pos);
  }
  ASSERT_FALSE(p.guards.empty());
  for (const CudaPlan::Guard& gd : p.guards) {
    EXPECT_GE(gd.bytes, 1024) << "%" << gd.value;
    EXPECT_EQ(gd.offset, p.offset[gd.value] + p.Bytes(gd.value));
    EXPECT_EQ(gd.writer, first[gd.value]);
    EXPECT_GE(gd.last, std::max(last[gd.value], gd.writer));
    for (int v = 0; v < static_cast<int>(p.metas.size()); ++v) {
      if (p.offset[v] < 0 || v == gd.value || first[v] < 0) continue;
      const int lo = std::max(first[v], first[gd.value]), hi = std::min(std::max(last[v], first[v]),
                                                                         std::max(last[gd.value], first[gd.value]));
      if (lo > hi) continue;  // never live together
      const bool apart = p.offset[v] + p.Bytes(v) <= gd.offset || gd.offset + gd.bytes <= p.offset[v];
      EXPECT_TRUE(apart) << "%" << v << " touches the guard after %" << gd.value;
    }
  }
  o.guard_bytes = -1;
  auto bad = PlanCuda(g, true, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("guard_bytes"), std::string::npos) << bad.status();
}

// A launch reading a value no launch writes is refused, not planned over.
TEST(AssignArena, ReadingAnUnwrittenValueIsInternal) {
  ir::Graph g = GptJoint(1);
  PlanOptions o;
  plan_internal::PlanState s(g, true, o);
  auto passes = plan_internal::PlanPipeline(o);
  ASSERT_EQ(passes.back()->name(), "assign_arena");
  for (size_t k = 0; k + 1 < passes.size(); ++k) ASSERT_TRUE(passes[k]->Run(s).ok()) << passes[k]->name();
  const int orphan = s.new_value({DType::kF32, {4}});
  s.p.root[orphan] = -1;
  s.p.launches[1].inputs.push_back(orphan);
  auto r = passes.back()->Run(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(std::string(r.status().message()).find("which no launch writes"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace loom::compiler::cuda
