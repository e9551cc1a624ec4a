// Flag parsing, size sweep and report formatting of `loom bench collectives`.
#include "collectives/bench/bench_config.h"

#include <string>
#include <utility>
#include <vector>

#include "collectives/bench/bench_result.h"
#include "gtest/gtest.h"

namespace loom::collectives::bench {
namespace {

TEST(BenchConfig, DefaultsAreTheFastSweep) {
  auto c = ParseBenchFlags({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backends, std::vector<std::string>{"gloo"});
  EXPECT_EQ(c->ranks, std::vector<int>{2});
  EXPECT_EQ(Sizes(*c), (std::vector<int64_t>{1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20}));
}

TEST(BenchConfig, FullThenExplicitFlagsOverride) {
  auto c = ParseBenchFlags({"--ranks=2", "--full", "--max_bytes=1M", "--step=2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backends, (std::vector<std::string>{"gloo", "ucx", "tcp"}));
  EXPECT_EQ(c->ranks, std::vector<int>{2});
  EXPECT_EQ(c->max_bytes, 1 << 20);
  EXPECT_EQ(Sizes(*c).size(), 11u);
  auto round = ParseBenchFlags(ToFlags(*c));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(Sizes(*round), Sizes(*c));
  EXPECT_EQ(round->backends, c->backends);
}

TEST(BenchConfig, BadFlagsNameTheFlag) {
  for (auto [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--frobnicate=1"}, "--frobnicate"},
           {{"--backends=gloo,mpi"}, "--backends"},
           {{"--ranks=two"}, "--ranks"},
           {{"--min-bytes=12X"}, "--min-bytes"},
           {{"--min-bytes=4M", "--max-bytes=1M"}, "--min-bytes"},
           {{"--step=3"}, "--step"},
           {{"--iters=0"}, "--iters"},
           {{"--rounds=0"}, "--rounds"},
           {{"--rounds"}, "--rounds"},
           {{"--torch=maybe"}, "--torch"},
           {{"--ops=broadcast"}, "--ops"},
           {{"positional"}, "positional"}}) {
    auto c = ParseBenchFlags(args);
    ASSERT_FALSE(c.ok()) << want;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(c.status().message()).find(want), std::string::npos) << c.status();
  }
}

// Both flag forms, and the nearest flag named for a typo (the parser took
// only --name=value and named no alternative).
TEST(BenchConfig, BothFormsAndSuggestions) {
  auto c = ParseBenchFlags({"--ranks", "4", "--max-bytes", "1M", "--json", "--step=2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ranks, std::vector<int>{4});
  EXPECT_EQ(c->max_bytes, 1 << 20);
  EXPECT_TRUE(c->json);
  EXPECT_EQ(c->step, 2);
  c = ParseBenchFlags({"--rank=2"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("unknown flag --rank (did you mean --ranks?)"), std::string::npos)
      << c.status();
  EXPECT_FALSE(ParseBenchFlags({"--ranks"}).ok());  // a value flag at the end still needs its value
}

TEST(BenchConfig, BytesAndFactors) {
  EXPECT_EQ(*ParseBytes("256M"), 256 << 20);
  EXPECT_EQ(*ParseBytes("1KiB"), 1024);
  EXPECT_EQ(*ParseBytes("4096"), 4096);
  EXPECT_FALSE(ParseBytes("0").ok());
  EXPECT_FALSE(ParseBytes("-1K").ok());
  EXPECT_EQ(FormatBytes(256 << 20), "256 MiB");
  EXPECT_EQ(FormatBytes(1000), "1000 B");
  EXPECT_DOUBLE_EQ(BusFactor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(BusFactor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor("reduce_scatter", 2), 0.5);
}

TEST(BenchResult, TableHasRatiosAndNa) {
  BenchReport r;
  r.rows.push_back({"loom:gloo", 2, "all_reduce", 1 << 20, 1000.0, true, ""});
  r.rows.push_back({"torch:gloo", 2, "all_reduce", 1 << 20, 2000.0, true, ""});
  r.rows.push_back({"loom:gloo", 2, "reduce_scatter", 1 << 20, 500.0, true, ""});
  r.rows.push_back({"torch:gloo", 2, "reduce_scatter", 1 << 20, 0, true,
                    "n/a (torch 1.13 Gloo has no reduce_scatter)"});
  r.checks = 3;
  std::string t = FormatTables(r, 2, {"all_reduce", "reduce_scatter"});
  EXPECT_NE(t.find("2.00x"), std::string::npos) << t;
  EXPECT_NE(t.find("1.049"), std::string::npos) << t;  // busbw = 1 MiB / 1 ms x 1.0
  EXPECT_NE(t.find("n/a (torch 1.13 Gloo has no reduce_scatter)"), std::string::npos) << t;
  EXPECT_EQ(VerificationLine(r).rfind("verification: ok", 0), 0u);
  r.wrong = 1;
  EXPECT_EQ(VerificationLine(r).rfind("verification: FAILED", 0), 0u);
  EXPECT_NE(FormatJson(r).find("\"verified\": false"), std::string::npos);
}

TEST(BenchConfig, CudaGlooBringsGlooAndABucket) {
  auto c = ParseBenchFlags({"--backends=cuda:gloo", "--bucket-bytes=256K", "--piece-bytes=128K", "--staging-path=ring"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->staging_path, "ring");
  EXPECT_EQ(c->backends, (std::vector<std::string>{"cuda:gloo", "gloo"}));
  EXPECT_EQ(c->bucket_bytes, 256 << 10);
  EXPECT_EQ(c->piece_bytes, 128 << 10);
  auto round = ParseBenchFlags(ToFlags(*c));
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(round->backends, c->backends);
  EXPECT_EQ(round->bucket_bytes, c->bucket_bytes);
  EXPECT_EQ(round->piece_bytes, c->piece_bytes);
  EXPECT_EQ(round->staging_path, "ring");
  EXPECT_EQ(ParseBenchFlags({})->staging_path, "auto");
  auto bad_path = ParseBenchFlags({"--staging-path=nvlink"});
  EXPECT_TRUE(absl::IsInvalidArgument(bad_path.status()));
  EXPECT_NE(bad_path.status().message().find("--staging-path"), std::string::npos) << bad_path.status();
  for (const char* flag : {"--bucket-bytes", "--piece-bytes"}) {
    auto bad = ParseBenchFlags({std::string(flag) + "=0"});
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
    EXPECT_NE(bad.status().message().find(flag), std::string::npos) << bad.status();
  }
}

TEST(BenchConfig, GlooNativeMinBytesIsAutomaticUnlessGiven) {
  auto none = ParseBenchFlags({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->gloo_native_min_bytes, -1);
  for (const auto& [flag, want] : std::vector<std::pair<std::string, int64_t>>{
           {"--gloo-native-min-bytes=64M", int64_t{64} << 20}, {"--gloo-native-min-bytes=0", 0}}) {
    auto c = ParseBenchFlags({flag});
    ASSERT_TRUE(c.ok()) << flag << ": " << c.status();
    EXPECT_EQ(c->gloo_native_min_bytes, want) << flag;
    auto round = ParseBenchFlags(ToFlags(*c));
    ASSERT_TRUE(round.ok()) << round.status();
    EXPECT_EQ(round->gloo_native_min_bytes, want) << flag;
  }
  auto bad = ParseBenchFlags({"--gloo-native-min-bytes=lots"});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("--gloo-native-min-bytes"), std::string::npos) << bad.status();
}

TEST(BenchConfig, ChannelsAreAutomaticUnlessGiven) {
  auto none = ParseBenchFlags({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->channels, 0);
  auto c = ParseBenchFlags({"--backends=tcp", "--channels=3"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->channels, 3);
  auto round = ParseBenchFlags(ToFlags(*c));
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(round->channels, 3);
  auto spaced = ParseBenchFlags({"--channels", "0"});
  ASSERT_TRUE(spaced.ok()) << spaced.status();
  EXPECT_EQ(spaced->channels, 0);
  for (const char* bad : {"--channels=9", "--channels=-1", "--channels=two", "--channels"}) {
    auto b = ParseBenchFlags({bad});
    EXPECT_TRUE(absl::IsInvalidArgument(b.status())) << bad;
    EXPECT_NE(b.status().message().find("--channels"), std::string::npos) << b.status();
  }
}

TEST(BenchResult, StagingBoundIsTheMinOfCopiesAndGloo) {
  BenchReport r;
  const int64_t mib = 1 << 20;
  // 1 MiB: cuda:gloo busbw 1.049 (x1 at 2 ranks), pinned d2h 2.097 (algbw),
  // h2d 4.194, loom:gloo 1.311: the bound is gloo's, 80%.
  r.rows.push_back({"loom:cuda:gloo", 2, "all_reduce", mib, 1000.0, true, ""});
  r.rows.push_back({"pinned:d2h", 2, "all_reduce", mib, 500.0, true, ""});
  r.rows.push_back({"pinned:h2d", 2, "all_reduce", mib, 250.0, true, ""});
  r.rows.push_back({"loom:gloo", 2, "all_reduce", mib, 800.0, true, ""});
  std::string t = FormatStagingBound(r, 2);
  EXPECT_NE(t.find("# cuda:gloo all_reduce 1 MiB x2: busbw 1.049 GB/s = 80% of min(pinned d2h 2.097, "
                   "pinned h2d 4.194, loom:gloo 1.311) GB/s"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("per op"), std::string::npos) << "no phases measured: no phase line";
  EXPECT_EQ(t.find("median"), std::string::npos) << "one round: no median line";
  EXPECT_EQ(FormatStagingBound(r, 4), "");
  EXPECT_NE(FormatTables(r, 2, {"all_reduce"}).find("pinned:d2h"), std::string::npos);
  // With the staging thread's phases: the pipeline's own cost is what the
  // run leaves after the three waits.
  BenchRow& x = r.rows[0];
  x.to_host_us = 100, x.inner_us = 600, x.to_device_us = 120, x.run_us = 950, x.algorithm_host_us = 40;
  t = FormatStagingBound(r, 2);
  EXPECT_NE(t.find("#   per op 1000 us: staging run 950 = wait for copies to host 100 + inner ops 600 + "
                   "wait for copies to device 120 + pipeline 130; the algorithm waited 40 us for pieces or other ranks"),
            std::string::npos)
      << t;
  // Several rounds: the same bound over the rounds' medians, on its own line.
  r.rows[0].median_us = 2000, r.rows[1].median_us = 500, r.rows[2].median_us = 250, r.rows[3].median_us = 1000;
  t = FormatStagingBound(r, 2);
  EXPECT_NE(t.find("#   median of the rounds: busbw 0.524 GB/s = 50% of min(2.097, 4.194, 1.049) GB/s"),
            std::string::npos)
      << t;
}

// --rounds: kept through ToFlags; the rows of several rounds collapse to the
// fastest of each (impl, ranks, op, size), phases with it, in first-seen
// order; a wrong result in any round keeps the row marked wrong.
TEST(BenchResult, RoundsKeepEachRowsFastest) {
  auto c = ParseBenchFlags({"--rounds=3"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rounds, 3);
  auto again = ParseBenchFlags(ToFlags(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rounds, 3);
  EXPECT_EQ(ParseBenchFlags({})->rounds, 1);

  const int64_t mib = 1 << 20;
  std::vector<BenchRow> rows;
  rows.push_back({"loom:cuda:gloo", 2, "all_reduce", mib, 900.0, true, ""});
  rows.back().inner_us = 800;
  rows.push_back({"loom:gloo", 2, "all_reduce", mib, 700.0, true, ""});
  rows.push_back({"loom:gloo", 2, "all_reduce", 4 * mib, 2000.0, true, ""});
  rows.push_back({"loom:gloo", 2, "all_reduce", mib, 650.0, true, ""});  // round 2: faster
  rows.push_back({"loom:cuda:gloo", 2, "all_reduce", mib, 950.0, true, ""});  // round 2: slower
  rows.push_back({"loom:gloo", 2, "all_reduce", 4 * mib, 2100.0, false, ""});  // slower, and wrong
  rows.push_back({"loom:gloo", 4, "all_reduce", mib, 500.0, true, ""});  // another rank count
  KeepFastest(&rows);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].impl, "loom:cuda:gloo");
  EXPECT_EQ(rows[0].time_us, 900.0);
  EXPECT_EQ(rows[0].inner_us, 800.0) << "the phases of the kept round";
  EXPECT_EQ(rows[1].time_us, 650.0);
  EXPECT_EQ(rows[2].bytes, 4 * mib);
  EXPECT_EQ(rows[2].time_us, 2000.0);
  EXPECT_FALSE(rows[2].ok) << "a wrong round stays visible";
  EXPECT_EQ(rows[3].ranks, 4);
  // The median of each row's rounds (two here: the mean of both); none for one round.
  EXPECT_EQ(rows[0].median_us, 925.0);
  EXPECT_EQ(rows[1].median_us, 675.0);
  EXPECT_EQ(rows[2].median_us, 2050.0);
  EXPECT_EQ(rows[3].median_us, 0.0);
  std::vector<BenchRow> three = {{"loom:gloo", 2, "all_reduce", mib, 500.0, true, ""},
                                 {"loom:gloo", 2, "all_reduce", mib, 1500.0, true, ""},
                                 {"loom:gloo", 2, "all_reduce", mib, 600.0, true, ""}};
  KeepFastest(&three);
  ASSERT_EQ(three.size(), 1u);
  EXPECT_EQ(three[0].time_us, 500.0);
  EXPECT_EQ(three[0].median_us, 600.0) << "an odd count: the middle round";
}

}  // namespace
}  // namespace loom::collectives::bench
