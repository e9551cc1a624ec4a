#include "runtime/checkpoint/manifest.h"

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

namespace loom::runtime::checkpoint {
namespace {

Manifest Sample() {
  Manifest m;
  m.step = 42;
  m.world_size = 4;
  m.sampler = {0xfedcba9876543210ull, 3, 17};
  m.job_spec = "model:\n  layers: 2\n\"quoted\"\n";
  m.layout = "tp=2 x dp=2";
  m.extra["rng"] = "philox:7:9";
  TensorRecord t;
  t.name = "w";
  t.dtype = DType::kBF16;
  t.shape = {4, 6};
  t.spec = "S(0)S(1)";
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      ShardRecord s;
      s.file = "rank0000" + std::to_string(2 * r + c) + ".safetensors";
      s.key = "w";
      s.rank = 2 * r + c;
      s.offsets = {2 * r, 3 * c};
      s.lengths = {2, 3};
      s.byte_begin = 64;
      s.byte_end = 64 + 12;
      s.crc32c = 0xdeadbeef;
      t.shards.push_back(s);
    }
  }
  m.tensors.push_back(t);
  TensorRecord scalar;
  scalar.name = "scale";
  scalar.dtype = DType::kF32;
  scalar.spec = "R";
  ShardRecord s;
  s.file = "rank00000.safetensors";
  s.key = "scale";
  s.byte_begin = 76;
  s.byte_end = 80;
  scalar.shards.push_back(s);
  m.tensors.push_back(scalar);
  return m;
}

TEST(Manifest, RoundTrip) {
  Manifest m = Sample();
  std::string j = ManifestToJson(m);
  auto p = ParseManifest(j, "m.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 42);
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->sampler, m.sampler);
  EXPECT_EQ(p->job_spec, m.job_spec);
  EXPECT_EQ(p->layout, m.layout);
  EXPECT_EQ(p->extra, m.extra);
  ASSERT_EQ(p->tensors.size(), 2u);
  const TensorRecord* w = p->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kBF16);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(w->spec, "S(0)S(1)");
  ASSERT_EQ(w->shards.size(), 4u);
  EXPECT_EQ(w->shards[3].offsets, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->shards[3].crc32c, 0xdeadbeefu);
  EXPECT_EQ(w->shards[3].byte_end, 76u);
  EXPECT_EQ(ManifestToJson(*p), j);
}

void ExpectBad(const Manifest& m, const char* expect) {
  auto p = ParseManifest(ManifestToJson(m), "bad.json");
  ASSERT_FALSE(p.ok()) << expect;
  EXPECT_TRUE(absl::StrContains(p.status().message(), "bad.json")) << p.status();
  EXPECT_TRUE(absl::StrContains(p.status().message(), expect)) << p.status();
}

TEST(Manifest, RejectsInconsistentShards) {
  Manifest m = Sample();
  m.tensors[0].shards[1].offsets = {0, 2};
  ExpectBad(m, "overlaps shard 0");
  m = Sample();
  m.tensors[0].shards.pop_back();
  ExpectBad(m, "cover 18 of 24");
  m = Sample();
  m.tensors[0].shards[0].lengths = {5, 3};
  ExpectBad(m, "outside");
  m = Sample();
  m.tensors[0].shards[0].byte_end = 70;
  ExpectBad(m, "does not hold 12 bytes");
  m = Sample();
  m.tensors[0].shards[0].file = "../etc/passwd";
  ExpectBad(m, "plain name");
  m = Sample();
  m.tensors[0].shards[0].rank = 9;
  ExpectBad(m, "outside world_size");
  m = Sample();
  m.tensors[1].name = "w";
  ExpectBad(m, "duplicate name");
  m = Sample();
  m.tensors[0].shards[0].offsets = {0};
  ExpectBad(m, "need 2 entries");
}

TEST(Manifest, RejectsMalformedJson) {
  std::string good = ManifestToJson(Sample());
  struct {
    std::string text;
    const char* expect;
  } cases[] = {
      {"{", "malformed JSON"},
      {"[]", "expected an object"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper"},
      {absl::StrReplaceAll(good, {{"\"BF16\"", "\"Q8\""}}), "unsupported dtype"},
      {absl::StrReplaceAll(good, {{"\"version\": 1", "\"version\": 2"}}), "unsupported version"},
      {absl::StrReplaceAll(good, {{"\"step\": 42", "\"step\": \"x\""}}), "expected an integer"},
      {absl::StrReplaceAll(good, {{"\"step\": 42", "\"step\": 1e400"}}), "malformed"},
      {absl::StrReplaceAll(good, {{"\"crc32c\": 3735928559", "\"crc32c\": 99999999999"}}), "32-bit"},
      {absl::StrReplaceAll(good, {{"\"layout\"", "\"layoutx\""}}), "missing field 'layout'"},
  };
  for (const auto& c : cases) {
    auto p = ParseManifest(c.text, "bad.json");
    ASSERT_FALSE(p.ok()) << c.expect;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(p.status().message(), c.expect)) << c.expect << ": " << p.status();
  }
}

}  // namespace
}  // namespace loom::runtime::checkpoint
