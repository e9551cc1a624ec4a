#include "collectives/tools/flight_recorder_diff.h"

#include "gtest/gtest.h"

namespace loom::collectives::tools {
namespace {

std::string Dump(std::vector<std::tuple<int, std::string, int>> ops) {
  FlightRecorder fr;
  for (auto& [seq, op, numel] : ops) {
    fr.Queued(seq, op, "f32", numel);
    fr.Started(seq);
    fr.Finished(seq, absl::OkStatus());
  }
  return fr.Dump();
}

TEST(FlightRecorderDiff, NoDivergence) {
  std::string d = Dump({{0, "all_reduce", 4}, {1, "barrier", 0}});
  auto r = FindDivergence({{0, d}, {1, d}});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->found);
}

TEST(FlightRecorderDiff, Mismatch) {
  std::string a = Dump({{0, "all_reduce", 4}, {1, "all_reduce", 8}});
  std::string b = Dump({{0, "all_reduce", 4}, {1, "broadcast", 8}});
  auto r = FindDivergence({{0, a}, {1, a}, {2, b}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->found);
  EXPECT_EQ(r->kind, "mismatch");
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->seq, 1u);
  EXPECT_NE(r->description.find("broadcast"), std::string::npos) << r->description;
}

TEST(FlightRecorderDiff, ExtraAndMissing) {
  std::string a = Dump({{0, "all_reduce", 4}});
  std::string b = Dump({{0, "all_reduce", 4}, {1, "all_gather", 4}});
  auto extra = FindDivergence({{0, a}, {1, b}, {2, a}});
  ASSERT_TRUE(extra.ok());
  EXPECT_EQ(extra->kind, "extra");
  EXPECT_EQ(extra->rank, 1);
  auto missing = FindDivergence({{0, b}, {1, a}, {2, b}});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->kind, "missing");
  EXPECT_EQ(missing->rank, 1);
}

TEST(FlightRecorderDiff, BadDumpRejected) {
  auto r = FindDivergence({{0, "garbage line\n"}});
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
}

}  // namespace
}  // namespace loom::collectives::tools
