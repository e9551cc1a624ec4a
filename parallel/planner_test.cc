// The planner's enumeration (counts, legality), its memory arithmetic per
// layout and the sanity of its ranking.
#include "parallel/planner.h"

#include <set>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace loom::parallel {
namespace {

v1::ModelSpec Gpt(int n_layer, int n_head, int d_model, int seq_len = 64, int vocab = 256) {
  v1::ModelSpec m;
  m.set_family("gpt");
  m.set_n_layer(n_layer);
  m.set_n_head(n_head);
  m.set_d_model(d_model);
  m.set_seq_len(seq_len);
  m.set_vocab(vocab);
  return m;
}

v1::ModelSpec Llama(int n_layer, int n_head, int n_kv, int d_model, int seq_len = 64, int vocab = 256) {
  v1::ModelSpec m = Gpt(n_layer, n_head, d_model, seq_len, vocab);
  m.set_family("llama");
  m.set_n_kv_head(n_kv);
  return m;
}

Hardware World(int world, int npn = 0) {
  Hardware hw;
  hw.world = world;
  hw.nproc_per_node = npn;
  return hw;
}

TEST(Enumerate, CountsEveryLegalFactorisation) {
  // world 4, 4 heads: (dp 4, tp 1) x zero 0..3; (2, 2) x zero 0..3 x sp; (1, 4) x sp.
  auto e = EnumerateLayouts(Gpt(2, 4, 64), 8, World(4));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->layouts.size(), 4u + 8u + 2u);
  EXPECT_TRUE(e->skipped.empty());

  // 6 heads: tp = 4 does not divide them.
  e = EnumerateLayouts(Gpt(2, 6, 96), 8, World(4));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->layouts.size(), 4u + 8u);
  ASSERT_EQ(e->skipped.size(), 1u);
  EXPECT_EQ(e->skipped[0].layout.tp, 4);
  EXPECT_EQ(e->skipped[0].reason, "parallel.tp: must divide model.n_head = 6 (got 4)");

  // llama 8 heads, 2 kv heads at world 8: tp 4 and 8 split the kv heads.
  e = EnumerateLayouts(Llama(2, 8, 2, 128), 16, World(8));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->layouts.size(), 4u + 8u);
  EXPECT_EQ(e->skipped.size(), 2u);
  for (const auto& s : e->skipped) EXPECT_NE(s.reason.find("model.n_kv_head = 2"), std::string::npos) << s.reason;

  // batch 4 cannot be split over dp = 8.
  e = EnumerateLayouts(Gpt(2, 8, 128), 4, World(8));
  ASSERT_TRUE(e.ok());
  for (const Layout& l : e->layouts) EXPECT_LE(l.dp, 4);
  ASSERT_FALSE(e->skipped.empty());
  EXPECT_EQ(e->skipped[0].reason, "train.batch_size: must be divisible by parallel.dp = 8 (got 4)");

  // A prime world size with one head: only pure data parallelism.
  e = EnumerateLayouts(Gpt(2, 1, 64), 7, World(7));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->layouts.size(), 4u);
}

TEST(Enumerate, EveryLayoutIsLegalAndDistinct) {
  for (int world : {1, 2, 4, 6, 8, 12}) {
    v1::ModelSpec m = Llama(2, 12, 6, 192);
    auto e = EnumerateLayouts(m, 24, World(world));
    ASSERT_TRUE(e.ok());
    std::set<std::string> names;
    for (const Layout& l : e->layouts) {
      EXPECT_EQ(l.dp * l.tp, world);
      EXPECT_TRUE(CheckParallelLayout(m, 24, l, world).ok()) << LayoutName(l);
      EXPECT_TRUE(names.insert(LayoutName(l)).second) << LayoutName(l);
      if (l.sequence_parallel) EXPECT_GT(l.tp, 1);
      if (l.zero_stage > 0) EXPECT_GT(l.dp, 1);
    }
  }
  EXPECT_FALSE(EnumerateLayouts(Gpt(2, 4, 64), 8, World(0)).ok());
}

// train.grad_accum_steps = 4: the activations of a quarter of the batch, the
// full local gradients of a micro-step for every ZeRO stage, and the
// accumulators (f32 per local parameter, plus the update's reduced gradients
// on dp > 1) counted in the total.
TEST(Estimate, GradientAccumulatorsAreCounted) {
  v1::ModelSpec m = Gpt(4, 4, 128, 64, 256);
  auto plain = Estimate(m, 16, World(1), {1, 1, 0, false});
  auto accum = Estimate(m, 16, World(1), {1, 1, 0, false}, nullptr, 4);
  auto quarter = Estimate(m, 4, World(1), {1, 1, 0, false});
  ASSERT_TRUE(plain.ok() && accum.ok() && quarter.ok());
  EXPECT_EQ(plain->memory.accumulators, 0);
  EXPECT_EQ(accum->memory.accumulators, accum->memory.parameters);
  EXPECT_EQ(accum->memory.activations, quarter->memory.activations);
  EXPECT_EQ(accum->memory.workspace, plain->memory.workspace);
  EXPECT_EQ(accum->memory.total(), accum->memory.state() + accum->memory.accumulators +
                                       accum->memory.activations + accum->memory.workspace);
  for (int s = 0; s <= 3; ++s) {
    auto c = Estimate(m, 16, World(4), {4, 1, s, false}, nullptr, 4);
    auto z0 = Estimate(m, 16, World(4), {4, 1, 0, false});
    auto zs = Estimate(m, 16, World(4), {4, 1, s, false});
    ASSERT_TRUE(c.ok() && z0.ok() && zs.ok()) << s;
    EXPECT_EQ(c->memory.gradients, z0->memory.gradients) << "ZeRO-" << s << ": a micro-step reduces no gradient";
    EXPECT_EQ(c->memory.accumulators, z0->memory.gradients + zs->memory.gradients) << "ZeRO-" << s;
  }
  auto odd = Estimate(m, 16, World(1), {1, 1, 0, false}, nullptr, 3);
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(absl::StrContains(odd.status().message(), "train.grad_accum_steps")) << odd.status();
}

TEST(Estimate, MemoryShrinksAsTheLayoutShards) {
  v1::ModelSpec m = Gpt(8, 8, 256, 128, 512);
  auto one = Estimate(m, 8, World(1), {1, 1, 0, false});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->memory.parameters, one->memory.gradients);
  EXPECT_EQ(one->memory.optimizer, 2 * one->memory.parameters);

  auto tp2 = Estimate(m, 8, World(2), {1, 2, 0, false});
  ASSERT_TRUE(tp2.ok());
  const double r_tp = static_cast<double>(tp2->memory.state()) / one->memory.state();
  EXPECT_GT(r_tp, 0.45);
  EXPECT_LT(r_tp, 0.6);
  // Sequence parallelism shards the norm/residual activations too.
  auto sp = Estimate(m, 8, World(2), {1, 2, 0, true});
  ASSERT_TRUE(sp.ok());
  EXPECT_LT(sp->memory.activations, tp2->memory.activations);
  EXPECT_EQ(sp->memory.state(), tp2->memory.state());

  // ZeRO stages at dp = 4: ZeRO-1 shards the optimizer state; ZeRO-2 the
  // gradients too (reduce_scattered right after their producers, so the arena
  // holds the shards); ZeRO-3 shards the parameters, plus the gathered copies
  // live at the peak.
  std::vector<MemoryEstimate> z;
  for (int s = 0; s <= 3; ++s) {
    auto c = Estimate(m, 8, World(4), {4, 1, s, false});
    ASSERT_TRUE(c.ok());
    z.push_back(c->memory);
  }
  EXPECT_EQ(z[1].optimizer * 4, z[0].optimizer);
  EXPECT_EQ(z[1].parameters, z[0].parameters);
  EXPECT_EQ(z[2].parameters, z[1].parameters);
  EXPECT_EQ(z[2].gradients, (z[1].gradients / 4 + 3) / 4 * 4);
  EXPECT_LT(z[2].state(), z[1].state());
  EXPECT_EQ(z[3].gradients, z[2].gradients);
  EXPECT_LT(z[3].parameters, z[2].parameters);
  EXPECT_GT(z[3].parameters, z[2].parameters / 4);
  EXPECT_EQ(z[3].activations, z[2].activations);
  // dp splits the batch: fewer activations per rank.
  auto dp4 = Estimate(m, 8, World(4), {4, 1, 0, false});
  EXPECT_LT(dp4->memory.activations, one->memory.activations / 3);
  // An illegal layout is refused with the reason.
  auto bad = Estimate(m, 8, World(3), {1, 3, 0, false});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.status().message()), "parallel.tp: must divide model.n_head = 8 (got 3)");
}

TEST(Estimate, LinksFollowTheMesh) {
  v1::ModelSpec m = Gpt(2, 8, 128);
  // 2 nodes of 4: tp = 4 stays in a node, dp goes across; tp = 8 crosses.
  auto a = Estimate(m, 8, World(8, 4), {2, 4, 0, false});
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->comm.tp_inter_node);
  EXPECT_TRUE(a->comm.dp_inter_node);
  auto b = Estimate(m, 8, World(8, 4), {1, 8, 0, false});
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->comm.tp_inter_node);
  auto c = Estimate(m, 8, World(4, 4), {4, 1, 0, false});
  EXPECT_FALSE(c->comm.dp_inter_node);
  EXPECT_EQ(c->comm.tp_bytes, 0);
  // Ring all-reduce: 2 (dp-1)/dp of the gradient bytes; ZeRO-3 moves 1.5x that.
  EXPECT_EQ(c->comm.dp_bytes, static_cast<int64_t>(2 * 0.75 * c->memory.gradients));
  auto z3 = Estimate(m, 8, World(4, 4), {4, 1, 3, false});
  EXPECT_NEAR(static_cast<double>(z3->comm.dp_bytes) / c->comm.dp_bytes, 1.5, 1e-6);
  // tp = 2 over batch 8 / dp 2 = 4 rows: per layer 4 all-reduces of [4, 64, 128]
  // f32 plus 2 more, each moving 2 (tp-1)/tp of it, and 3 [4*64] f32 reductions.
  auto t2 = Estimate(m, 8, World(4, 4), {2, 2, 0, false});
  ASSERT_TRUE(t2.ok());
  const double act = 4.0 * 64 * 128 * 4;
  EXPECT_EQ(t2->comm.tp_bytes, static_cast<int64_t>((4 * 2 + 2) * act + 3 * 4 * 64 * 4));
  // A single rank has no communication and its step is its compute.
  auto solo = Estimate(m, 8, World(1), {1, 1, 0, false});
  EXPECT_EQ(solo->comm.dp_bytes + solo->comm.tp_bytes, 0);
  EXPECT_DOUBLE_EQ(solo->step_seconds, solo->compute_seconds);
  EXPECT_NEAR(solo->compute_seconds * 4, c->compute_seconds * 16, 1e-12);
}

TEST(Plan, MoreMemoryNeverMakesTheWinnerSlower) {
  for (const v1::ModelSpec& m : {Gpt(8, 16, 1024, 512, 4096), Llama(8, 16, 4, 1024, 512, 4096)}) {
    double prev = 1e300;
    int found = 0;
    for (double gib = 0.25; gib <= 64; gib *= 1.5) {
      Hardware hw = World(8, 4);
      hw.memory_bytes = gib * (1ull << 30);
      auto p = MakePlan(m, 16, hw);
      ASSERT_TRUE(p.ok()) << p.status();
      if (p->winner < 0) {
        EXPECT_EQ(found, 0) << "a larger budget lost its winner";
        continue;
      }
      ++found;
      const double t = p->best()->step_seconds;
      EXPECT_LE(t, prev * (1 + 1e-12)) << gib << " GiB";
      prev = t;
    }
    EXPECT_GT(found, 0);
  }
}

TEST(Plan, AModelThatDoesNotFitAloneIsSharded) {
  v1::ModelSpec m = Gpt(12, 16, 1024, 512, 8192);
  auto solo = Estimate(m, 16, World(4), {4, 1, 0, false});
  ASSERT_TRUE(solo.ok());
  Hardware hw = World(4);
  hw.memory_bytes = solo->memory.total() * 0.8;  // the replicated layout does not fit
  auto p = MakePlan(m, 16, hw);
  ASSERT_TRUE(p.ok());
  ASSERT_GE(p->winner, 0) << p->reason;
  const Layout& w = p->best()->layout;
  EXPECT_TRUE(w.tp > 1 || w.zero_stage > 0) << LayoutName(w);
  EXPECT_LE(p->best()->memory.total(), hw.memory_bytes);
  // Infeasible candidates rank after every feasible one, with the reason.
  bool seen_infeasible = false;
  for (const Candidate& c : p->ranked) {
    if (!c.feasible) {
      seen_infeasible = true;
      EXPECT_NE(c.reason.find("> budget"), std::string::npos) << c.reason;
    } else {
      EXPECT_FALSE(seen_infeasible);
    }
  }
  EXPECT_TRUE(seen_infeasible);
  EXPECT_EQ(p->reason.rfind("fits in memory", 0), 0u) << p->reason;
  EXPECT_NE(p->reason.find("fastest estimated step"), std::string::npos);

  // Nothing fits in 1 MiB: no winner, and the reason says so.
  hw.memory_bytes = 1 << 20;
  p = MakePlan(m, 16, hw);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->winner, -1);
  EXPECT_EQ(p->reason.rfind("no layout fits", 0), 0u) << p->reason;
}

TEST(Plan, TableAndJsonNameTheChoice) {
  auto p = MakePlan(Gpt(2, 4, 128), 8, World(4));
  ASSERT_TRUE(p.ok());
  std::string table = FormatPlanTable(*p);
  EXPECT_NE(table.find("choice: " + LayoutName(p->best()->layout)), std::string::npos) << table;
  EXPECT_NE(table.find("1*"), std::string::npos);
  std::string json = PlanToJson(*p);
  EXPECT_NE(json.find("\"winner\": 0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"candidates\""), std::string::npos);
}

}  // namespace
}  // namespace loom::parallel
