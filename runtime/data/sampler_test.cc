#include "runtime/data/sampler.h"

#include <set>

#include "gtest/gtest.h"

namespace loom::runtime::data {
namespace {

TEST(SampleSet, WindowsStayInsideShardsAndLocateInOrder) {
  // Shards of 10, 3 and 9 tokens; windows of 4 + 1 tokens, stride 4.
  EXPECT_EQ(SamplesIn(10, 4, 5), 2);
  EXPECT_EQ(SamplesIn(3, 4, 5), 0);
  EXPECT_EQ(SamplesIn(9, 4, 5), 2);
  EXPECT_EQ(SamplesIn(5, 4, 5), 1);
  SampleSet s = AllSamples({10, 3, 9}, 4, 5);
  ASSERT_EQ(s.size(), 4);
  EXPECT_EQ(s.Locate(0), std::make_pair(0, int64_t{0}));
  EXPECT_EQ(s.Locate(1), std::make_pair(0, int64_t{4}));
  EXPECT_EQ(s.Locate(2), std::make_pair(2, int64_t{0}));
  EXPECT_EQ(s.Locate(3), std::make_pair(2, int64_t{4}));
}

TEST(Split, IsDeterministicDisjointAndComplete) {
  const std::vector<int64_t> shards = {100 * kSplitBlock + 17, 7 * kSplitBlock, 33};
  const int64_t T = 64;
  auto a = SplitByFraction(shards, T, T + 1, kSplitBlock / T, 0.1, 7);
  auto b = SplitByFraction(shards, T, T + 1, kSplitBlock / T, 0.1, 7);
  auto c = SplitByFraction(shards, T, T + 1, kSplitBlock / T, 0.1, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::set<std::pair<int, int64_t>> train, val, val_c;
  for (int64_t i = 0; i < a->train.size(); ++i) train.insert(a->train.Locate(i));
  for (int64_t i = 0; i < a->val.size(); ++i) val.insert(a->val.Locate(i));
  for (int64_t i = 0; i < c->val.size(); ++i) val_c.insert(c->val.Locate(i));
  const int64_t all = AllSamples(shards, T, T + 1).size();
  EXPECT_EQ(static_cast<int64_t>(train.size() + val.size()), all);
  for (const auto& w : val) EXPECT_EQ(train.count(w), 0u);
  EXPECT_NE(val, val_c);
  EXPECT_GT(a->val.size(), all / 40);
  EXPECT_LT(a->val.size(), all / 4);
  ASSERT_EQ(b->val.size(), a->val.size());
  for (int64_t i = 0; i < a->val.size(); ++i) EXPECT_EQ(a->val.Locate(i), b->val.Locate(i));
  // Tiny data: one window each way at least; one window is an error.
  auto tiny = SplitByFraction({3 * T + 1}, T, T + 1, kSplitBlock / T, 0.1, 1);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->train.size() + tiny->val.size(), 3);
  EXPECT_GE(tiny->val.size(), 1);
  EXPECT_GE(tiny->train.size(), 1);
  EXPECT_FALSE(SplitByFraction({T + 1}, T, T + 1, 1, 0.1, 1).ok());
}

TEST(Permute, IsABijectionThatChangesWithTheEpoch) {
  for (int64_t n : {1, 2, 3, 5, 16, 17, 100, 1000, 4097}) {
    std::set<int64_t> seen;
    int64_t fixed_points = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = Permute(9, 0, i, n);
      ASSERT_GE(p, 0);
      ASSERT_LT(p, n);
      seen.insert(p);
      fixed_points += p == i;
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "n = " << n;
    if (n >= 100) {
      EXPECT_LT(fixed_points, n / 10) << "n = " << n;
    }
  }
  int64_t same = 0;
  for (int64_t i = 0; i < 1000; ++i) same += Permute(9, 0, i, 1000) == Permute(9, 1, i, 1000);
  EXPECT_LT(same, 50);
}

TEST(Sampler, VisitsEverySampleOncePerEpochAndResumesExactly) {
  auto s = Sampler::Create(10, 3);
  ASSERT_TRUE(s.ok());
  std::set<int64_t> seen;
  for (int i = 0; i < 10; ++i) {
    seen.insert(s->Peek());
    s->Advance(1);
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(s->state().epoch, 1);
  s->Advance(3);
  const SamplerState saved = s->state();
  EXPECT_EQ(saved.position, 3);
  std::vector<int64_t> next;
  for (int i = 0; i < 25; ++i) {  // crosses two more epoch boundaries
    next.push_back(s->Peek());
    s->Advance(1);
  }
  auto r = Sampler::Create(10, 999);
  ASSERT_TRUE(r->Restore(saved).ok());
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ(r->Peek(), next[i]) << i;
    r->Advance(1);
  }
  EXPECT_EQ(r->state(), s->state());
  EXPECT_FALSE(r->Restore({3, 0, 11}).ok());
  EXPECT_FALSE(Sampler::Create(0, 1).ok());
  auto seq = Sampler::Create(4, 1, Order::kSequential);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(seq->Peek(i), i % 4);
}

TEST(Sampler, RanksDrawingTheirRowsReproduceTheGlobalBatches) {
  // A global batch of 6 over 3 ranks (2 rows each), 7 steps over 17 samples:
  // each rank peeks only its rows; together they are the one-process draws.
  const int64_t n = 17, global = 6, steps = 7;
  auto one = Sampler::Create(n, 5);
  std::vector<int64_t> want;
  std::vector<uint64_t> want_draws;
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < global; ++r) {
      want.push_back(one->Peek(r));
      want_draws.push_back(one->DrawIndex(r));
    }
    one->Advance(global);
  }
  std::vector<int64_t> got(want.size());
  std::vector<uint64_t> got_draws(want.size());
  for (int rank = 0; rank < 3; ++rank) {
    auto mine = Sampler::Create(n, 5);
    for (int s = 0; s < steps; ++s) {
      for (int r = 2 * rank; r < 2 * rank + 2; ++r) {
        got[s * global + r] = mine->Peek(r);
        got_draws[s * global + r] = mine->DrawIndex(r);
      }
      mine->Advance(global);
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_draws, want_draws);
  std::set<uint64_t> unique(want_draws.begin(), want_draws.end());
  EXPECT_EQ(unique.size(), want_draws.size());
}

}  // namespace
}  // namespace loom::runtime::data
