// GPT-2's byte-level BPE: the byte alphabet and merges worked out by hand; a
// vocabulary trained by an independent Python implementation
// (testing/gpt2_reference.py, which runs GPT-2's pattern through Python's
// `re`) encoding the test corpus to the same ids from vocab.json + merges.txt
// and from both tokenizer.json forms; exact round trips; errors naming the
// file, the line or the JSON field.
#include "runtime/data/gpt2_tokenizer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/data/testing/corpus.h"

namespace loom::runtime::data {
namespace {

using json = nlohmann::json;

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string Shell(const std::string& cmd, int* code) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (p != nullptr && fgets(buf, sizeof(buf), p)) out += buf;
  *code = p == nullptr ? -1 : pclose(p);
  return out;
}

// A vocabulary of the 256 byte symbols (ids 0..255 in byte order), the
// given merges, then <|endoftext|>.
std::string MakeFiles(const std::string& name, const std::vector<std::pair<std::string, std::string>>& merges) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  const std::array<uint32_t, 256> alphabet = Gpt2ByteAlphabet();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[Utf8(alphabet[b])] = b;
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& [a, b] : merges) {
    const size_t next_id = vocab.size();
    if (!vocab.contains(a + b)) vocab[a + b] = next_id;
    merges_txt += a + " " + b + "\n";
  }
  const size_t eot_id = vocab.size();
  vocab[kEndOfText] = eot_id;
  testing::WriteFile(dir + "/vocab.json", vocab.dump());
  testing::WriteFile(dir + "/merges.txt", merges_txt);
  return dir;
}

std::unique_ptr<Gpt2Tokenizer> Load(const std::string& dir) {
  auto t = Gpt2Tokenizer::FromFiles(dir + "/vocab.json", "--vocab", dir + "/merges.txt", "--merges");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> Ids(const Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids;
  EXPECT_TRUE(t.Encode(text, &ids).ok());
  return ids;
}

TEST(Gpt2Tokenizer, ByteAlphabetAsGpt2DefinesIt) {
  const std::array<uint32_t, 256> a = Gpt2ByteAlphabet();
  EXPECT_EQ(a[' '], 0x120u);   // 'Ġ'
  EXPECT_EQ(a['\n'], 0x10Au);  // 'Ċ'
  EXPECT_EQ(a[0], 0x100u);
  EXPECT_EQ(a['a'], static_cast<uint32_t>('a'));
  EXPECT_EQ(a['!'], static_cast<uint32_t>('!'));
  EXPECT_EQ(a[0x7F], 0x121u);  // after the 33 bytes 0x00..0x20
  EXPECT_EQ(a[0xA0], 0x142u);
  EXPECT_EQ(a[0xA1], 0xA1u);
  EXPECT_EQ(a[0xAD], 0x143u);  // the last one
  EXPECT_EQ(a[0xFF], 0xFFu);
}

TEST(Gpt2Tokenizer, MergesApplyByRankLeftToRight) {
  const std::string g = Utf8(0x120);  // a space
  const std::string dir = MakeFiles("hand", {{"b", "c"}, {"a", "b"}, {"a", "a"}, {"h", "e"}, {"l", "l"},
                                             {"he", "ll"}, {"hell", "o"}, {g, "w"}});
  std::unique_ptr<Gpt2Tokenizer> t = Load(dir);
  ASSERT_NE(t, nullptr);
  // Ids: bytes 0..255, then bc 256, ab 257, aa 258, he 259, ll 260, hell 261,
  // hello 262, " w" 263, <|endoftext|> 264.
  EXPECT_EQ(t->vocab_size(), 265);
  EXPECT_EQ(t->eot_id(), 264);
  EXPECT_EQ(Ids(*t, "hello"), (std::vector<int32_t>{262}));
  EXPECT_EQ(Ids(*t, "abc"), (std::vector<int32_t>{'a', 256}));  // "b c" ranks before "a b"
  EXPECT_EQ(Ids(*t, "aaa"), (std::vector<int32_t>{258, 'a'}));  // left to right
  EXPECT_EQ(Ids(*t, "aaaa"), (std::vector<int32_t>{258, 258}));
  EXPECT_EQ(Ids(*t, "hello world"), (std::vector<int32_t>{262, 263, 'o', 'r', 'l', 'd'}));
  // Pieces do not merge across the pre-tokenizer's cuts: "o" + " w" stay apart.
  EXPECT_EQ(Ids(*t, "ab ab"), (std::vector<int32_t>{257, ' ', 257}));
  // The end-of-text marker spelled in text is ordinary text.
  EXPECT_EQ(Ids(*t, kEndOfText).size(), std::strlen(kEndOfText));  // no merges apply
  EXPECT_EQ(*t->Decode({262, 263, 264}), std::string("hello w") + kEndOfText);
  auto bad = t->Decode({1, 265});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token id 265"), std::string::npos) << bad.status();
}

// The Python reference trains 300 merges on fortunes text and the hard
// documents; every document must encode to the reference's ids, through
// each of the three file forms, and decode back to its bytes.
TEST(Gpt2Tokenizer, MatchesIndependentPythonImplementation) {
  const std::string dir = ::testing::TempDir() + "/reference";
  std::filesystem::create_directories(dir);
  std::vector<std::string> docs = testing::HardDocuments();
  docs.push_back(testing::FortuneText("computers", 30000));
  std::string files;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string path = absl::StrCat(dir, "/doc", i, ".txt");
    testing::WriteFile(path, docs[i]);
    files += " " + path;
  }
  int code = 0;
  const std::string script = "timeout 120 /usr/bin/python3 runtime/data/testing/gpt2_reference.py";
  std::string out = Shell(absl::StrCat(script, " make-vocab ", dir, " 300", files), &code);
  ASSERT_EQ(code, 0) << out;
  out = Shell(absl::StrCat(script, " encode ", dir, "/vocab.json ", dir, "/merges.txt", files), &code);
  ASSERT_EQ(code, 0) << out;
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), docs.size()) << out;

  const size_t reference_ids = json::parse(std::ifstream(dir + "/vocab.json")).size();
  std::vector<std::unique_ptr<Tokenizer>> forms;
  forms.push_back(Load(dir));
  for (const char* json_file : {"tokenizer.json", "tokenizer-pairs.json"}) {
    auto t = Gpt2Tokenizer::FromJson(absl::StrCat(dir, "/", json_file), "--tokenizer-json");
    ASSERT_TRUE(t.ok()) << t.status();
    forms.push_back(std::move(*t));
  }
  for (const auto& t : forms) {
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->vocab_size(), static_cast<int64_t>(reference_ids));
    EXPECT_EQ(t->eot_id(), t->vocab_size() - 1);
    for (size_t i = 0; i < docs.size(); ++i) {
      std::vector<int32_t> ids = Ids(*t, docs[i]);
      EXPECT_EQ(json(ids), json::parse(lines[i])) << "document " << i;
      auto back = t->Decode(ids);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, docs[i]) << "document " << i;
    }
  }
  // Real compression on prose (the merges were learned from it).
  EXPECT_LT(Ids(*forms[0], docs.back()).size(), docs.back().size() * 7 / 10);
}

TEST(Gpt2Tokenizer, EncodesTheSameOnManyThreads) {
  const std::string g = Utf8(0x120);
  std::unique_ptr<Gpt2Tokenizer> t = Load(MakeFiles("threads", {{"t", "h"}, {"th", "e"}, {g, "the"}}));
  ASSERT_NE(t, nullptr);
  const std::string text = testing::FortuneText("computers", 50000);
  const std::vector<int32_t> want = Ids(*t, text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { got[i] = Ids(*t, text); });
  for (auto& th : threads) th.join();
  for (const auto& g2 : got) EXPECT_EQ(g2, want);
}

void ExpectError(const absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>>& t, const std::vector<std::string>& needles) {
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  for (const std::string& n : needles)
    EXPECT_NE(t.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << t.status().message();
}

TEST(Gpt2Tokenizer, BadFilesNameTheFileAndWhatIsWrong) {
  const std::string dir = MakeFiles("bad", {{"a", "b"}});
  const std::string vocab = dir + "/vocab.json", merges = dir + "/merges.txt", bad = dir + "/bad";
  auto files = [&](const std::string& v, const std::string& m) {
    return Gpt2Tokenizer::FromFiles(v, "data.tokenizer.vocab", m, "data.tokenizer.merges");
  };
  ExpectError(files("/no/vocab.json", merges), {"data.tokenizer.vocab: /no/vocab.json: cannot read"});
  testing::WriteFile(bad, "{\"a\": 1,");
  ExpectError(files(bad, merges), {"data.tokenizer.vocab: " + bad, "malformed JSON"});
  testing::WriteFile(bad, "{\"a\": \"one\"}");
  ExpectError(files(bad, merges), {"data.tokenizer.vocab: " + bad, "token 'a'", "\"one\""});
  testing::WriteFile(bad, "{\"a\": 0, \"b\": 1, \"<|endoftext|>\": 2}");
  ExpectError(files(bad, merges), {"no token for byte 0x00"});
  json v = json::parse(std::ifstream(vocab));
  v.erase(kEndOfText);
  testing::WriteFile(bad, v.dump());
  ExpectError(files(bad, merges), {"no <|endoftext|> token"});
  testing::WriteFile(bad, "#version: 0.2\na b\nc d e\n");
  ExpectError(files(vocab, bad), {"data.tokenizer.merges: " + bad, "line 3", "'c d e'"});
  testing::WriteFile(bad, "#version: 0.2\na b\nq zz\n");
  ExpectError(files(vocab, bad), {"line 3", "'zz' is not in the vocabulary"});
  testing::WriteFile(bad, "#version: 0.2\nb a\n");
  ExpectError(files(vocab, bad), {"line 2", "merged token 'ba'"});
  testing::WriteFile(bad, "");
  ExpectError(files(vocab, bad), {"no merge rules"});

  auto with_json = [&](const json& j) {
    testing::WriteFile(bad, j.dump());
    return Gpt2Tokenizer::FromJson(bad, "--tokenizer-json");
  };
  json good = {{"model", {{"type", "BPE"}, {"vocab", json::parse(std::ifstream(vocab))}, {"merges", {"a b"}}}}};
  EXPECT_TRUE(with_json(good).ok()) << with_json(good).status();
  json j = good;
  j["model"]["type"] = "WordPiece";
  ExpectError(with_json(j), {"--tokenizer-json: " + bad, "model.type: expected BPE, got 'WordPiece'"});
  j = good;
  j["normalizer"] = {{"type", "NFC"}};
  ExpectError(with_json(j), {"normalizer: GPT-2 has none"});
  j = good;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  ExpectError(with_json(j), {"pre_tokenizer.add_prefix_space"});
  j = good;
  j["model"]["merges"] = {"a b", 7};
  ExpectError(with_json(j), {"model.merges[1]"});
  j = good;
  j["added_tokens"] = {{{"id", 3}, {"content", "<x>"}}};
  ExpectError(with_json(j), {"id 3 is given to two tokens"});
  j = good;
  j["model"].erase("vocab");
  ExpectError(with_json(j), {"model.vocab: missing"});
}

}  // namespace
}  // namespace loom::runtime::data
