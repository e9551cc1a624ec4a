#include "dtensor/spec.h"

#include "gtest/gtest.h"

namespace loom::dtensor {
namespace {

MeshShape Mesh22() { return MeshShape{{"dp", "tp"}, {2, 2}}; }

TEST(SpecTest, PlacementTextRoundTrips) {
  for (const char* t : {"R", "S(0)", "S(3)", "P(sum)", "P(avg)"}) {
    auto p = ParsePlacement(t);
    ASSERT_TRUE(p.ok()) << t;
    EXPECT_EQ(p->ToString(), t);
  }
  auto bad = ParsePlacement("S(-1)");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("S(-1)"), std::string::npos);
  EXPECT_FALSE(ParsePlacement("Q").ok());
}

TEST(SpecTest, SpecParsesPositionalAndNamed) {
  auto a = ParseSpec("S(0),R", Mesh22());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->ToString(), "[dp=S(0), tp=R]");
  auto b = ParseSpec("[tp=S(1), dp=P(avg)]", Mesh22());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ToString(), "[dp=P(avg), tp=S(1)]");
  EXPECT_TRUE(b->has_partial());
  EXPECT_FALSE(ParseSpec("R", Mesh22()).ok());
  auto c = ParseSpec("[pp=R, tp=R]", Mesh22());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("pp"), std::string::npos);
}

TEST(SpecTest, MeshCoordinatesAreRowMajorLastFastest) {
  MeshShape m = Mesh22();
  EXPECT_EQ(m.Coordinates(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(m.Coordinates(2), (std::vector<int64_t>{1, 0}));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(m.RankAt(m.Coordinates(r)), r);
  EXPECT_TRUE(m.Validate().ok());
  EXPECT_FALSE((MeshShape{{"a", "a"}, {1, 2}}).Validate().ok());
  EXPECT_FALSE((MeshShape{{"a"}, {0}}).Validate().ok());
}

TEST(SpecTest, ChunksFollowTorchChunk) {
  // torch.chunk(arange(10), 4) -> 3, 3, 3, 1
  EXPECT_EQ(ChunkRange(10, 4, 0).length, 3);
  EXPECT_EQ(ChunkRange(10, 4, 3).offset, 9);
  EXPECT_EQ(ChunkRange(10, 4, 3).length, 1);
  // torch.chunk(arange(2), 4) -> 1, 1, (empty), (empty)
  EXPECT_EQ(ChunkRange(2, 4, 2).length, 0);
  EXPECT_EQ(ChunkRange(2, 4, 3).offset, 2);
}

TEST(SpecTest, LocalBlockNestsMeshDims) {
  MeshShape m = Mesh22();
  DTensorSpec both{m, {Placement::Shard(0), Placement::Shard(0)}};
  // Rank (1, 0): dp outer split -> rows [4, 8), then tp piece 0 -> [4, 6).
  auto b = LocalBlock({8, 3}, both, {1, 0});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[0].offset, 4);
  EXPECT_EQ((*b)[0].length, 2);
  EXPECT_EQ((*b)[1].length, 3);
  DTensorSpec two{m, {Placement::Replicate(), Placement::Shard(1)}};
  auto s = LocalShape({8, 6}, two, {1, 1});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int64_t>{8, 3}));
  DTensorSpec bad{m, {Placement::Shard(2), Placement::Replicate()}};
  EXPECT_FALSE(LocalBlock({8, 6}, bad, {0, 0}).ok());
}

}  // namespace
}  // namespace loom::dtensor
