// Prepare: shards in llm.c's format whose documents decode back to the
// input's documents, separated by end-of-text ids; output identical for any
// thread count; u32 ids past 65536; bad input named.
#include "runtime/data/prepare.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/data/gpt2_tokenizer.h"
#include "runtime/data/testing/corpus.h"
#include "runtime/data/testing/gpt2_files.h"
#include "runtime/data/tokenizer.h"

namespace loom::runtime::data {
namespace {

namespace fs = std::filesystem;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Temp(const std::string& name) {
  const std::string p = ::testing::TempDir() + "/" + name;
  fs::remove_all(p);
  return p;
}

// Ids of one shard, after checking its header.
std::vector<int32_t> ReadShard(const std::string& path, bool wide) {
  const std::string bytes = Read(path);
  EXPECT_GE(bytes.size(), 1024u);
  const int32_t* h = reinterpret_cast<const int32_t*>(bytes.data());
  EXPECT_EQ(h[0], wide ? 20240801 : 20240520);
  EXPECT_EQ(h[1], wide ? 7 : 1);
  const size_t width = wide ? 4 : 2;
  EXPECT_EQ(bytes.size(), 1024 + static_cast<size_t>(h[2]) * width) << path;
  std::vector<int32_t> ids(h[2]);
  for (int32_t i = 0; i < h[2]; ++i)
    ids[i] = wide ? reinterpret_cast<const uint32_t*>(bytes.data() + 1024)[i]
                  : reinterpret_cast<const uint16_t*>(bytes.data() + 1024)[i];
  return ids;
}

// Every shard of a split, concatenated.
std::vector<int32_t> ReadSplit(const std::string& dir, const PrepareSummary& s, int split, bool wide = false) {
  std::vector<int32_t> all;
  for (const std::string& name : s.shards[split]) {
    std::vector<int32_t> ids = ReadShard(dir + "/" + name, wide);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  return all;
}

// The documents of a token stream: what lies after each end-of-text id.
std::vector<std::string> Documents(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> docs;
  EXPECT_TRUE(ids.empty() || ids[0] == t.eot_id());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i + 1;
    while (j < ids.size() && ids[j] != t.eot_id()) ++j;
    auto text = t.Decode(std::vector<int32_t>(ids.begin() + i + 1, ids.begin() + j));
    EXPECT_TRUE(text.ok()) << text.status();
    docs.push_back(text.ok() ? *text : "");
    i = j;
  }
  return docs;
}

// Documents separated by "-- 8< --" lines, the hard documents among them
// (the fortunes text has "%" lines of its own; no line "-- 8< --").
std::vector<std::string> WriteInputs(const std::string& dir, std::vector<std::string>* docs) {
  fs::create_directories(dir);
  std::vector<std::string> all = testing::HardDocuments();
  const std::string prose = testing::FortuneText("computers", 60000);
  for (size_t pos = 0; pos < prose.size(); pos += 700) all.push_back(prose.substr(pos, 700) + "\n");
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    std::string text;
    for (size_t i = f; i < all.size(); i += 3) {
      std::string d = all[i];
      if (!d.empty() && d.back() != '\n') d += "\n";  // a document ends where its last line ends
      if (d.empty()) continue;                          // empty documents are dropped
      text += d + "-- 8< --\n";
      docs->push_back(d);
    }
    files.push_back(absl::StrCat(dir, "/part", f, ".txt"));
    testing::WriteFile(files.back(), text);
  }
  return files;
}

std::map<std::string, std::string> FolderBytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = Read(e.path().string());
  return out;
}

TEST(Prepare, ShardsHoldTheDocumentsAndAreTheSameOnAnyThreadCount) {
  std::vector<std::string> docs;
  PrepareOptions o;
  o.inputs = WriteInputs(Temp("prep_in"), &docs);
  o.documents = "line=-- 8< --";
  o.train_type = "bpe";
  o.vocab_size = 700;
  o.shard_tokens = 5000;  // several shards; documents run across them
  o.batch_bytes = 4000;   // many batches
  std::map<std::string, std::string> first;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    o.threads = threads;
    o.out_dir = Temp(absl::StrCat("prep_out", threads));
    auto s = Prepare(o, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->documents[0], static_cast<int64_t>(docs.size()));
    EXPECT_EQ(s->documents[1], 0);
    EXPECT_GT(s->shards[0].size(), 2u);
    EXPECT_EQ(s->dtype, "u16");
    std::map<std::string, std::string> bytes = FolderBytes(o.out_dir);
    if (threads == 1) {
      auto tok = LoadTokenizerFolder(o.out_dir, "test");
      ASSERT_TRUE(tok.ok()) << tok.status();
      std::vector<int32_t> ids = ReadSplit(o.out_dir, *s, 0);
      EXPECT_EQ(static_cast<int64_t>(ids.size()), s->tokens[0]);
      std::vector<std::string> got = Documents(**tok, ids);
      ASSERT_EQ(got.size(), docs.size());
      for (size_t i = 0; i < docs.size(); ++i) ASSERT_EQ(got[i], docs[i]) << "document " << i;
      first = bytes;
    } else {
      ASSERT_EQ(bytes.size(), first.size());
      for (const auto& [name, content] : first)  // shards, tokenizer.model, descriptions: byte for byte
        EXPECT_TRUE(bytes[name] == content) << name << " differs";
    }
  }
}

TEST(Prepare, ValidationDocumentsAreASeededShareAndBlankLinesCutDocuments) {
  const std::string in = Temp("prep_blank");
  fs::create_directories(in);
  std::string text;
  std::vector<std::string> docs;
  for (int i = 0; i < 400; ++i) {
    docs.push_back(absl::StrCat("document ", i, " line one\nline two of ", i, "\n"));
    text += docs.back() + (i % 2 ? "\n" : "\r\n\n");
  }
  testing::WriteFile(in + "/a.txt", text);
  const std::string dir = testing::WriteGpt2Files(in, testing::EnglishMerges());
  PrepareOptions o;
  o.inputs = {in + "/a.txt"};
  o.documents = "blank-line";
  o.tokenizer.set_vocab(dir + "/vocab.json");
  o.tokenizer.set_merges(dir + "/merges.txt");
  o.val_fraction = 0.25;
  o.seed = 3;
  o.out_dir = Temp("prep_blank_out");
  auto s = Prepare(o, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->documents[0] + s->documents[1], 400);
  EXPECT_GT(s->documents[1], 60);
  EXPECT_LT(s->documents[1], 140);
  auto tok = LoadTokenizerFolder(o.out_dir, "test");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "gpt2");
  std::vector<std::string> train = Documents(**tok, ReadSplit(o.out_dir, *s, 0));
  std::vector<std::string> val = Documents(**tok, ReadSplit(o.out_dir, *s, 1));
  EXPECT_EQ(static_cast<int64_t>(val.size()), s->documents[1]);
  // Each document lands whole in one split, in input order.
  size_t t = 0, v = 0;
  for (const std::string& d : docs) {
    if (t < train.size() && train[t] == d) {
      ++t;
    } else {
      ASSERT_LT(v, val.size());
      EXPECT_EQ(val[v++], d);
    }
  }
  EXPECT_EQ(t, train.size());
  // Another seed picks other documents.
  o.seed = 4;
  o.out_dir = Temp("prep_blank_out4");
  auto s4 = Prepare(o, nullptr);
  ASSERT_TRUE(s4.ok());
  EXPECT_NE(Documents(**tok, ReadSplit(o.out_dir, *s4, 1)), val);
}

TEST(Prepare, LargeVocabulariesWriteU32ShardsAndTheByteTokenizerHasNoSeparator) {
  const std::string in = Temp("prep_wide");
  fs::create_directories(in);
  testing::WriteFile(in + "/a.txt", "the thing\n");
  testing::WriteFile(in + "/b.txt", "another thing\n");
  testing::WriteGpt2Files(in, testing::EnglishMerges(), 70000);
  PrepareOptions o;
  o.inputs = {in + "/a.txt", in + "/b.txt"};  // --documents file: one document per file
  o.tokenizer.set_vocab(in + "/vocab.json");
  o.tokenizer.set_merges(in + "/merges.txt");
  o.out_dir = Temp("prep_wide_out");
  auto s = Prepare(o, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dtype, "u32");
  auto tok = LoadTokenizerFolder(o.out_dir, "test");
  ASSERT_TRUE(tok.ok());
  EXPECT_GT((*tok)->eot_id(), 65535);
  std::vector<int32_t> ids = ReadSplit(o.out_dir, *s, 0, /*wide=*/true);
  EXPECT_EQ(Documents(**tok, ids), (std::vector<std::string>{"the thing\n", "another thing\n"}));
  o.dtype = "u16";
  o.out_dir = Temp("prep_wide_u16");
  auto narrow = Prepare(o, nullptr);
  ASSERT_FALSE(narrow.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(narrow.status()));
  EXPECT_NE(narrow.status().message().find("--dtype: the tokenizer has 70265 ids and u16 holds ids below 65536"),
            std::string::npos)
      << narrow.status();

  PrepareOptions b;
  b.inputs = o.inputs;
  b.tokenizer.set_kind("bytes");
  b.out_dir = Temp("prep_bytes");
  auto sb = Prepare(b, nullptr);
  ASSERT_TRUE(sb.ok()) << sb.status();
  std::vector<int32_t> bytes = ReadSplit(b.out_dir, *sb, 0);
  EXPECT_EQ(*MakeByteTokenizer()->Decode(bytes), "the thing\nanother thing\n");
  // --format raw: the same ids without the header.
  b.format = "raw";
  b.out_dir = Temp("prep_bytes_raw");
  auto raw = Prepare(b, nullptr);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Read(b.out_dir + "/train_000000.bin"), Read(::testing::TempDir() + "/prep_bytes/train_000000.bin").substr(1024));
  EXPECT_EQ(nlohmann::json::parse(Read(b.out_dir + "/dataset.json"))["format"], "raw");
}

void ExpectBad(const PrepareOptions& o, const std::vector<std::string>& needles) {
  auto s = Prepare(o, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  for (const std::string& n : needles)
    EXPECT_NE(s.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << s.status().message();
}

TEST(Prepare, BadInputNamesTheFlagOrFile) {
  const std::string in = Temp("prep_bad");
  fs::create_directories(in);
  testing::WriteFile(in + "/text.txt", "some text\n");
  testing::WriteFile(in + "/empty.txt", "");
  testing::WriteFile(in + "/seps.txt", "%\n%\n");
  PrepareOptions o;
  o.tokenizer.set_kind("bytes");
  o.out_dir = Temp("prep_bad_out");
  o.inputs = {in + "/missing.txt"};
  ExpectBad(o, {"--input", in + "/missing.txt", "cannot open"});
  o.inputs = {in};
  ExpectBad(o, {"--input", "not a regular file"});
  o.inputs = {in + "/empty.txt"};
  ExpectBad(o, {"--input", "empty.txt", "the input files are empty"});
  o.inputs = {in + "/seps.txt"};
  o.documents = "line=%";
  ExpectBad(o, {"--input", "no documents"});
  o.inputs = {in + "/text.txt"};
  o.documents = "paragraph";
  ExpectBad(o, {"--documents", "expected file, blank-line or line=TEXT", "paragraph"});
  o.documents = "file";
  PrepareOptions m = o;
  m.tokenizer.set_kind("sentencepiece");
  m.tokenizer.set_model(in + "/none.model");
  ExpectBad(m, {"--model: no such file", "none.model"});
  m.tokenizer.set_model(in + "/text.txt");
  ExpectBad(m, {"--model: " + in + "/text.txt: not a SentencePiece model"});
  PrepareOptions g = o;
  g.tokenizer.set_kind("gpt2");
  g.tokenizer.set_vocab(in + "/text.txt");
  g.tokenizer.set_merges(in + "/text.txt");
  ExpectBad(g, {"--vocab: " + in + "/text.txt: malformed JSON"});
  g.tokenizer.clear_merges();
  ExpectBad(g, {"--merges", "kind gpt2 needs vocab.json and merges.txt"});
  PrepareOptions t = o;
  t.tokenizer.Clear();
  t.train_type = "bpe";
  ExpectBad(t, {"--vocab-size", "give the vocabulary size"});
  t.vocab_size = 100;
  ExpectBad(t, {"--train-tokenizer bpe --vocab-size 100", "at least 260"});
  t.tokenizer.set_model("x.model");
  ExpectBad(t, {"--train-tokenizer", "leave out the tokenizer files"});
  PrepareOptions n = o;
  n.val_fraction = 1;
  ExpectBad(n, {"--val-fraction", "[0, 1)"});
  n = o;
  n.shard_tokens = 0;
  ExpectBad(n, {"--shard-tokens"});
  n = o;
  n.threads = 0;
  ExpectBad(n, {"--threads", "must be positive"});
  n = o;
  n.out_dir = in;  // not empty
  ExpectBad(n, {"--out", "must be a new or empty folder"});
}

}  // namespace
}  // namespace loom::runtime::data
