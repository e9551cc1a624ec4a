// PlanRedistribute: the fewest-collectives table on 1-d meshes, a few nested
// cases on 2-d meshes, and an exhaustive sweep that every pair plans.
#include "dtensor/redistribute_plan.h"

#include <map>

#include "gtest/gtest.h"

namespace loom::dtensor {
namespace {

MeshShape Mesh1(int64_t k) { return MeshShape{{"x"}, {k}}; }

DTensorSpec Spec(const MeshShape& m, const std::string& text) {
  auto s = ParseSpec(text, m);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status();
  return *s;
}

std::string Plan(const MeshShape& m, const std::string& from, const std::string& to, int nd = 2) {
  auto p = PlanRedistribute(Spec(m, from), Spec(m, to), nd);
  if (!p.ok()) return std::string(p.status().message());
  return PlanToString(*p);
}

TEST(Plan, OneDimTable) {
  MeshShape m = Mesh1(4);
  const std::map<std::pair<std::string, std::string>, std::string> want = {
      {{"R", "R"}, "(none)"},
      {{"R", "S(0)"}, "slice(0: R->S(0))"},
      {{"R", "P(sum)"}, "zero_unless_first(0: R->P(sum))"},
      {{"R", "P(avg)"}, "(none)"},
      {{"S(0)", "R"}, "all_gather(0: S(0)->R)"},
      {{"S(0)", "S(0)"}, "(none)"},
      {{"S(0)", "S(1)"}, "all_to_all(0: S(0)->S(1))"},
      {{"S(0)", "P(sum)"}, "pad_to_partial(0: S(0)->P(sum))"},
      {{"S(0)", "P(avg)"}, "pad_to_partial(0: S(0)->P(avg))"},
      {{"P(sum)", "R"}, "all_reduce(0: P(sum)->R)"},
      {{"P(avg)", "R"}, "all_reduce(0: P(avg)->R)"},
      {{"P(sum)", "S(1)"}, "reduce_scatter(0: P(sum)->S(1))"},
      {{"P(avg)", "S(0)"}, "reduce_scatter(0: P(avg)->S(0))"},
      {{"P(sum)", "P(avg)"}, "scale(0: P(sum)->P(avg))"},
      {{"P(avg)", "P(sum)"}, "scale(0: P(avg)->P(sum))"},
  };
  for (const auto& [k, v] : want) EXPECT_EQ(Plan(m, k.first, k.second), v) << k.first << " -> " << k.second;
}

TEST(Plan, AtMostOneCollectivePerPairOnOneDim) {
  MeshShape m = Mesh1(3);
  const char* all[] = {"R", "S(0)", "S(1)", "P(sum)", "P(avg)"};
  for (const char* a : all)
    for (const char* b : all) {
      auto p = PlanRedistribute(Spec(m, a), Spec(m, b), 2);
      ASSERT_TRUE(p.ok()) << a << "->" << b << ": " << p.status();
      int coll = 0;
      for (const auto& s : *p) coll += s.is_collective();
      EXPECT_LE(coll, 1) << a << "->" << b << ": " << PlanToString(*p);
      EXPECT_LE(p->size(), 1u) << a << "->" << b << ": " << PlanToString(*p);
    }
}

TEST(Plan, NestedShards) {
  MeshShape m{{"dp", "tp"}, {2, 2}};
  // Inner split first, then the outer one.
  EXPECT_EQ(Plan(m, "S(0),S(0)", "R,R"), "all_gather(1: S(0)->R); all_gather(0: S(0)->R)");
  EXPECT_EQ(Plan(m, "R,R", "S(0),S(0)"), "slice(0: R->S(0)); slice(1: R->S(0))");
  // Keeping the outer split: one gather.
  EXPECT_EQ(Plan(m, "S(0),S(0)", "S(0),R"), "all_gather(1: S(0)->R)");
  // The inner split can only stay if the outer one does.
  EXPECT_EQ(Plan(m, "S(0),S(0)", "R,S(0)"),
            "all_gather(1: S(0)->R); all_gather(0: S(0)->R); slice(1: R->S(0))");
  // Moving tp's shard onto the dim dp already splits: one all_to_all.
  EXPECT_EQ(Plan(m, "S(0),S(1)", "S(0),S(0)"), "all_to_all(1: S(1)->S(0))");
  EXPECT_EQ(Plan(m, "S(0),S(0)", "S(0),S(1)"), "all_to_all(1: S(0)->S(1))");
  // Swapping which mesh dim shards which tensor dim.
  EXPECT_EQ(Plan(m, "S(0),S(1)", "S(1),S(0)"),
            "all_gather(1: S(1)->R); all_to_all(0: S(0)->S(1)); slice(1: R->S(0))");
  // Partial reduced where the block is smallest.
  EXPECT_EQ(Plan(m, "P(sum),S(0)", "R,R"), "all_reduce(0: P(sum)->R); all_gather(1: S(0)->R)");
  EXPECT_EQ(Plan(m, "P(sum),R", "R,S(1)"), "slice(1: R->S(1)); all_reduce(0: P(sum)->R)");
  EXPECT_EQ(Plan(m, "P(sum),P(avg)", "S(0),S(0)"),
            "reduce_scatter(0: P(sum)->S(0)); reduce_scatter(1: P(avg)->S(0))");
}

TEST(Plan, EveryPairPlansOnTwoAndThreeDimMeshes) {
  std::vector<Placement> all = {Placement::Replicate(), Placement::Shard(0), Placement::Shard(1),
                                Placement::Shard(2), Placement::Partial(PartialOp::kSum),
                                Placement::Partial(PartialOp::kAvg)};
  for (int nm = 2; nm <= 3; ++nm) {
    MeshShape m;
    for (int i = 0; i < nm; ++i) {
      m.names.push_back(std::string(1, static_cast<char>('a' + i)));
      m.sizes.push_back(2 + i);
    }
    std::vector<DTensorSpec> specs;
    int total = 1;
    for (int i = 0; i < nm; ++i) total *= static_cast<int>(all.size());
    for (int code = 0; code < total; ++code) {
      DTensorSpec s{m, {}};
      for (int i = 0, c = code; i < nm; ++i, c /= static_cast<int>(all.size()))
        s.placements.push_back(all[c % all.size()]);
      specs.push_back(s);
    }
    for (const auto& a : specs)
      for (const auto& b : specs) {
        auto p = PlanRedistribute(a, b, 3);
        ASSERT_TRUE(p.ok()) << a.ToString() << " -> " << b.ToString() << ": " << p.status();
        int coll = 0;
        for (const auto& s : *p) coll += s.is_collective();
        EXPECT_LE(coll, 2 * nm) << a.ToString() << " -> " << b.ToString();
      }
  }
}

TEST(Plan, ErrorsNameTheSpec) {
  MeshShape m = Mesh1(2);
  auto p = PlanRedistribute(Spec(m, "S(2)"), Spec(m, "R"), 2);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("from_spec"), std::string::npos) << p.status();
  p = PlanRedistribute(Spec(m, "R"), Spec(m, "S(5)"), 2);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("to_spec"), std::string::npos) << p.status();
  DTensorSpec other = Spec(MeshShape{{"y"}, {2}}, "R");
  p = PlanRedistribute(Spec(m, "R"), other, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("to_spec"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace loom::dtensor
