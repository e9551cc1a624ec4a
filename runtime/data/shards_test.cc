#include "runtime/data/shards.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "runtime/data/npy.h"
#include "runtime/data/testing/files.h"

namespace loom::runtime::data {
namespace {

namespace fs = std::filesystem;
using testing::Llmc;
using testing::Npy;
using testing::Raw;
using testing::Write;

std::string Dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/shards_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<int32_t> ReadAll(const TokenSource& s, int shard, int64_t vocab = 1 << 30) {
  std::vector<int32_t> out(static_cast<size_t>(s.shard(shard).num_tokens));
  absl::Status st = s.Read(shard, 0, s.shard(shard).num_tokens, vocab, out.data());
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

void ExpectError(const absl::StatusOr<std::unique_ptr<TokenSource>>& s, const std::vector<std::string>& needles) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  for (const std::string& n : needles)
    EXPECT_NE(std::string(s.status().message()).find(n), std::string::npos) << n << " not in: " << s.status();
}

TEST(Shards, EveryFormatReadsTheSameIds) {
  const std::string d = Dir("formats");
  const std::vector<uint32_t> ids = {0, 7, 300, 50256, 65535};
  const std::vector<int32_t> want(ids.begin(), ids.end());
  Write(d + "/a.u16", Raw(std::vector<uint16_t>(ids.begin(), ids.end())));
  Write(d + "/a.u32", Raw(ids));
  Write(d + "/gpt2.bin", Llmc(ids));
  Write(d + "/llama3.bin", Llmc({0, 7, 300, 50256, 65535}, 20240801, 7));
  Write(d + "/a.npy", Npy("<u2", {5}, Raw(std::vector<uint16_t>(ids.begin(), ids.end()))));
  Write(d + "/b.npy", Npy("<i8", {5}, Raw(std::vector<int64_t>(ids.begin(), ids.end()))));
  struct Case {
    std::string file, format, dtype;
    Format expect;
  };
  for (const Case& c : {Case{"a.u16", "tokens", "u16", Format::kTokens}, Case{"a.u32", "tokens", "u32", Format::kTokens},
                        Case{"gpt2.bin", "llmc", "", Format::kLlmc}, Case{"gpt2.bin", "auto", "", Format::kLlmc},
                        Case{"llama3.bin", "auto", "", Format::kLlmc}, Case{"a.npy", "npy", "", Format::kNpy},
                        Case{"b.npy", "auto", "", Format::kNpy}}) {
    auto s = TokenSource::Open(d + "/" + c.file, c.format, c.dtype, "data.path");
    ASSERT_TRUE(s.ok()) << c.file << ": " << s.status();
    EXPECT_EQ((*s)->format(), c.expect) << c.file;
    EXPECT_EQ(ReadAll(**s, 0), want) << c.file;
  }
  // Text: bytes are the ids; auto reads a file without a known magic as text.
  Write(d + "/t.txt", "héllo");
  auto t = TokenSource::Open(d + "/t.txt", "auto", "", "data.path");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->format(), Format::kText);
  EXPECT_EQ(ReadAll(**t, 0), (std::vector<int32_t>{'h', 0xc3, 0xa9, 'l', 'l', 'o'}));
}

TEST(Shards, DirectoriesAndGlobsAreSortedShardLists) {
  const std::string d = Dir("glob");
  Write(d + "/train_002.bin", Llmc({5, 6}));
  Write(d + "/train_000.bin", Llmc({1, 2}));
  Write(d + "/train_001.bin", Llmc({3, 4}));
  Write(d + "/val_000.bin", Llmc({9, 9}));
  auto g = TokenSource::Open(d + "/train_*.bin", "auto", "", "data.path");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->num_shards(), 3);
  EXPECT_EQ((*g)->num_tokens(), 6);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadAll(**g, i), (std::vector<int32_t>{2 * i + 1, 2 * i + 2}));
  auto all = TokenSource::Open(d, "llmc", "", "data.path");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)->num_shards(), 4);
  // A text directory skips fortune index files (*.dat, *.u8).
  const std::string f = Dir("fortunes");
  Write(f + "/a", "one\n%\n");
  Write(f + "/a.dat", Raw(std::vector<uint32_t>{2, 0, 0}));
  Write(f + "/a.u8", "x");
  auto txt = TokenSource::Open(f, "text", "", "data.path");
  ASSERT_TRUE(txt.ok()) << txt.status();
  EXPECT_EQ((*txt)->num_shards(), 1);
}

TEST(Shards, BadInputNamesTheFileAndField) {
  const std::string d = Dir("bad");
  ExpectError(TokenSource::Open(Dir("empty_dir"), "auto", "", "data.path"), {"data.path", "holds no data files"});
  ExpectError(TokenSource::Open(d + "/nothing_*.bin", "auto", "", "data.path"), {"data.path", "no file matches"});
  auto missing = TokenSource::Open(d + "/no_such_file", "auto", "", "data.path");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  // A 0-byte file, in every format.
  Write(d + "/zero.bin", "");
  for (const char* f : {"auto", "text", "tokens", "llmc", "npy"})
    ExpectError(TokenSource::Open(d + "/zero.bin", f, "u16", "data.path"), {"zero.bin", "empty file (0 bytes)"});
  // A glob mixing llm.c shards and .npy arrays.
  const std::string m = Dir("mixed");
  Write(m + "/s_0.bin", Llmc({1, 2, 3}));
  Write(m + "/s_1.bin", Npy("<u2", {2}, Raw(std::vector<uint16_t>{1, 2})));
  ExpectError(TokenSource::Open(m + "/s_*", "auto", "", "data.path"),
              {"data.path", "mixed formats", "s_0.bin is llmc", "s_1.bin is npy"});
  // Wrong magic and wrong version.
  Write(d + "/magic.bin", Llmc({1, 2, 3}, 20240521));
  ExpectError(TokenSource::Open(d + "/magic.bin", "llmc", "", "data.path"),
              {"magic.bin", "header[0] (magic, byte offset 0) is 20240521", "20240520"});
  Write(d + "/version.bin", Llmc({1, 2, 3}, 20240520, 2));
  ExpectError(TokenSource::Open(d + "/version.bin", "llmc", "", "data.path"),
              {"version.bin", "header[1] (version, byte offset 4) is 2"});
  // A stated format that the header contradicts.
  ExpectError(TokenSource::Open(m + "/s_0.bin", "tokens", "u16", "data.path"),
              {"s_0.bin", "data.format is tokens", "llmc magic at byte offset 0"});
  ExpectError(TokenSource::Open(m + "/s_0.bin", "npy", "", "data.path"), {"s_0.bin", "\\x93NUMPY"});
}

TEST(Shards, TruncationIsReportedWithItsOffset) {
  const std::string d = Dir("trunc");
  std::string full = Llmc({1, 2, 3, 4});
  Write(d + "/cut.bin", full.substr(0, full.size() - 3));  // 1024 + 8 bytes expected, 1029 present
  ExpectError(TokenSource::Open(d + "/cut.bin", "auto", "", "data.path"),
              {"cut.bin", "truncated", "header[2] (token count, byte offset 8) says 4 tokens", "ending at byte offset 1032",
               "1029 bytes"});
  Write(d + "/header.bin", full.substr(0, 100));
  ExpectError(TokenSource::Open(d + "/header.bin", "llmc", "", "data.path"), {"header.bin", "truncated llm.c header", "100"});
  Write(d + "/extra.bin", full + "xx");
  ExpectError(TokenSource::Open(d + "/extra.bin", "auto", "", "data.path"), {"extra.bin", "trailing bytes"});
  Write(d + "/odd.u16", "abc");
  ExpectError(TokenSource::Open(d + "/odd.u16", "tokens", "u16", "data.path"),
              {"odd.u16", "not a multiple of 2", "byte offset 2"});
  std::string npy = Npy("<u4", {4}, Raw(std::vector<uint32_t>{1, 2, 3, 4}));
  Write(d + "/cut.npy", npy.substr(0, npy.size() - 1));
  ExpectError(TokenSource::Open(d + "/cut.npy", "auto", "", "data.path"),
              {"cut.npy", "truncated", absl::StrCat("ending at byte offset ", npy.size()),
               absl::StrCat(npy.size() - 1, " bytes")});
}

TEST(Shards, IdsAtOrAboveVocabAreErrorsWithFileAndOffset) {
  const std::string d = Dir("vocab");
  Write(d + "/v.bin", Llmc({1, 2, 999, 4}));
  auto s = TokenSource::Open(d + "/v.bin", "auto", "", "data.path");
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int32_t> out(4);
  EXPECT_TRUE((*s)->Read(0, 0, 2, 1000, out.data()).ok());
  absl::Status st = (*s)->Read(0, 0, 4, 999, out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  for (const char* n : {"v.bin", "token id 999", "byte offset 1028", "model.vocab = 999"})
    EXPECT_NE(std::string(st.message()).find(n), std::string::npos) << n << " not in: " << st;
  bool scanned = false;
  EXPECT_FALSE((*s)->ScanIds(999, 1 << 20, &scanned).ok());
  EXPECT_TRUE(scanned);
  EXPECT_TRUE((*s)->ScanIds(999, 4, &scanned).ok());  // larger than the scan limit: not scanned
  EXPECT_FALSE(scanned);
  // Negative ids of a signed .npy are out of range too.
  Write(d + "/neg.npy", Npy("<i4", {3}, Raw(std::vector<int32_t>{1, -5, 2})));
  auto n = TokenSource::Open(d + "/neg.npy", "auto", "", "data.path");
  ASSERT_TRUE(n.ok()) << n.status();
  st = (*n)->Read(0, 0, 3, 100, out.data());
  EXPECT_NE(std::string(st.message()).find("token id -5"), std::string::npos) << st;
}

TEST(Npy, HeaderFieldsAndUnsupportedLayouts) {
  const std::string d = Dir("npy");
  auto parse = [&](const std::string& bytes) {
    return ParseNpyHeader(bytes, static_cast<int64_t>(bytes.size()), "x.npy");
  };
  auto h = parse(Npy("<f4", {3, 2}, std::string(24, '\0')));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->type.ToString(), "f4");
  EXPECT_EQ(h->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(h->count, 6);
  EXPECT_EQ(h->data_offset % 64, 0);
  EXPECT_FALSE(parse(Npy(">i4", {1}, std::string(4, '\0'))).ok());  // big-endian
  EXPECT_FALSE(parse(Npy("<c8", {1}, std::string(8, '\0'))).ok());  // complex
  std::string fortran = Npy("<f4", {1}, std::string(4, '\0'));
  fortran.replace(fortran.find("False"), 5, "True ");
  auto f = parse(fortran);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("fortran_order"), std::string::npos);
  EXPECT_FALSE(parse("not an npy file").ok());
  // Element conversions: f2, i1 sign extension, u8.
  std::string half = Raw(std::vector<uint16_t>{0x3c00, 0xc000});  // 1.0, -2.0
  EXPECT_EQ(ElementAsDouble(reinterpret_cast<const uint8_t*>(half.data()), {'f', 2}, 1), -2.0);
  std::string i1 = "\xff\x05";
  bool exact = false;
  EXPECT_EQ(ElementAsInt(reinterpret_cast<const uint8_t*>(i1.data()), {'i', 1}, 0, &exact), -1);
  EXPECT_TRUE(exact);
  std::string fl = Raw(std::vector<float>{2.5f});
  ElementAsInt(reinterpret_cast<const uint8_t*>(fl.data()), {'f', 4}, 0, &exact);
  EXPECT_FALSE(exact);
}

}  // namespace
}  // namespace loom::runtime::data
