#include "runtime/checkpoint/safetensors.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace loom::runtime::checkpoint {
namespace {

std::string TmpDir() {
  const char* t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string MakeFile(const std::string& header, const std::string& data) {
  std::string f(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return f + header + data;
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

TEST(Safetensors, RoundTripAllDTypesAndPartialRead) {
  std::string path = TmpDir() + "/rt.safetensors";
  std::vector<double> v = {1.5, -2.25, 3, 0, 7, -8};
  std::vector<Tensor> ts;
  std::vector<TensorToWrite> w;
  for (DType d : kAllDTypes) {
    ts.push_back(Tensor::FromVector({2, 3}, v, d));
    w.push_back({absl::StrCat("t.", DTypeName(d)), d, {2, 3}, ts.back().raw_data()});
  }
  Tensor scalar = Tensor::FromVector({}, {42}, DType::kF32);
  w.push_back({"scalar", DType::kF32, {}, scalar.raw_data()});
  Tensor empty = Tensor::MustEmpty({0, 4}, DType::kF32);
  w.push_back({"empty", DType::kF32, {0, 4}, empty.raw_data()});
  auto written = WriteSafetensors(path, w, {{"format", "pt"}});
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->size(), w.size());

  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->index().metadata.at("format"), "pt");
  EXPECT_EQ(r->index().data_start % 8, 0u);
  for (int i = 0; i < 7; ++i) {
    auto t = r->ReadTensor(w[i].name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype(), w[i].dtype);
    EXPECT_EQ(std::vector<int64_t>(t->shape().begin(), t->shape().end()), w[i].shape);
    EXPECT_EQ(std::memcmp(t->raw_data(), ts[i].raw_data(), ts[i].nbytes()), 0) << w[i].name;
  }
  auto s = r->ReadTensor("scalar");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->GetDouble(0), 42);
  EXPECT_TRUE(r->ReadTensor("empty").ok());
  EXPECT_EQ(r->ReadTensor("nope").status().code(), absl::StatusCode::kNotFound);

  // A byte range from the middle of one tensor; and a range past its end.
  const TensorEntry* e = r->index().Find("t.f32");
  ASSERT_NE(e, nullptr);
  float two[2];
  ASSERT_TRUE(r->ReadBytes(*e, 8, two, 8).ok());
  EXPECT_EQ(two[0], 3.0f);
  EXPECT_EQ(two[1], 0.0f);
  EXPECT_FALSE(r->ReadBytes(*e, 20, two, 8).ok());
  EXPECT_FALSE(r->ReadBytes(*e, ~0ull, two, 8).ok());
}

// Every hostile header is rejected with InvalidArgument naming the file.
TEST(Safetensors, HostileHeadersAreRejected) {
  const std::string data(64, 'x');
  struct Case {
    const char* what;
    std::string header;
    const char* expect;
  } cases[] = {
      {"malformed", "{\"a\": {", "malformed JSON"},
      {"not object", "[1,2]", "top level"},
      {"unknown dtype", R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "unsupported dtype"},
      {"overlap", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", "overlap"},
      {"out of range", R"({"a":{"dtype":"F32","shape":[32],"data_offsets":[0,128]}})", "out of range"},
      {"begin > end", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", "out of range"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "needs 12"},
      {"overflow", R"({"a":{"dtype":"F64","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]}})", "overflows"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "negative"},
      {"float dim", R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,0]}})", "non-integer"},
      {"missing offsets", R"({"a":{"dtype":"F32","shape":[1]}})", "needs dtype"},
      {"3 offsets", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "2 entries"},
      {"duplicate name", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "duplicate"},
      {"unknown key", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "unknown key"},
      {"nested", R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", "unexpected array"},
      {"metadata non-string", R"({"__metadata__":{"k":1}})", "__metadata__"},
      {"metadata not object", R"({"__metadata__":"x"})", "expected an object"},
      {"too many dims", R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", "dims"},
      {"deep", std::string(100000, '[') , "top level"},
      {"trailing", R"({} {})", "malformed"},
      {"empty", "", "malformed"},
  };
  for (const Case& c : cases) {
    auto r = ParseSafetensorsBuffer(MakeFile(c.header, data), "evil.safetensors");
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "evil.safetensors")) << c.what << ": " << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.expect)) << c.what << ": " << r.status();
  }
}

TEST(Safetensors, TensorCountCap) {
  std::string h = "{";
  for (int i = 0; i < 20; ++i) {
    absl::StrAppend(&h, i ? "," : "", "\"t", i, "\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[", i, ",", i + 1,
                    "]}");
  }
  h += "}";
  std::string f = MakeFile(h, std::string(20, '\1'));
  SafetensorsLimits lim;
  EXPECT_TRUE(ParseSafetensorsBuffer(f, "x", lim).ok());
  lim.max_tensors = 10;
  auto r = ParseSafetensorsBuffer(f, "x", lim);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "more than 10 tensors")) << r.status();
}

TEST(Safetensors, HostileLengthPrefixOnDisk) {
  std::string dir = TmpDir();
  // Header length beyond the file.
  std::string f = MakeFile("{}", "");
  f[0] = 100;
  WriteRaw(dir + "/long.safetensors", f);
  auto r = SafetensorsReader::Open(dir + "/long.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "long.safetensors")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "past the end")) << r.status();
  // Header length above the cap (never allocated).
  f = MakeFile("{}", "");
  f[7] = 0x7f;
  WriteRaw(dir + "/huge.safetensors", f);
  r = SafetensorsReader::Open(dir + "/huge.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "exceeds the limit")) << r.status();
  // Shorter than the length prefix.
  WriteRaw(dir + "/short.safetensors", "abc");
  r = SafetensorsReader::Open(dir + "/short.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "shorter than")) << r.status();
  // Missing file.
  r = SafetensorsReader::Open(dir + "/missing.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "missing.safetensors")) << r.status();
  // Truncated data section: offsets now out of range.
  Tensor t = Tensor::FromVector({4}, {1, 2, 3, 4});
  ASSERT_TRUE(WriteSafetensors(dir + "/trunc.safetensors", {{"a", DType::kF32, {4}, t.raw_data()}}, {}).ok());
  ASSERT_EQ(truncate((dir + "/trunc.safetensors").c_str(), 20 + 8), 0);
  r = SafetensorsReader::Open(dir + "/trunc.safetensors");
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace loom::runtime::checkpoint
