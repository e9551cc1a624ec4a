// SentencePiece models trained here (BPE and unigram) round-trip every test
// document exactly; a normalizing model is used as SentencePiece uses it;
// training and loading errors name what is wrong.
#include "runtime/data/sentencepiece_tokenizer.h"

#include <filesystem>
#include <cstring>
#include <fstream>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/data/internal/sp_bridge.h"
#include "runtime/data/testing/corpus.h"

namespace loom::runtime::data {
namespace {

// The lines (with their newlines) of fortunes text, as training sentences.
std::function<bool(std::string*)> Lines(const std::string& text) {
  auto lines = std::make_shared<std::vector<std::string>>();
  for (absl::string_view l : absl::StrSplit(text, '\n')) lines->push_back(std::string(l) + "\n");
  auto i = std::make_shared<size_t>(0);
  return [lines, i](std::string* s) {
    if (*i >= lines->size()) return false;
    *s = (*lines)[(*i)++];
    return true;
  };
}

std::unique_ptr<SentencePieceTokenizer> Train(const std::string& type, int vocab) {
  SentencePieceTrainOptions o;
  o.model_type = type;
  o.vocab_size = vocab;
  auto t = TrainSentencePiece(o, Lines(testing::FortuneText("linux", 40000)), "test");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

void ExpectExactRoundTrip(const Tokenizer& t) {
  std::vector<std::string> docs = testing::HardDocuments();
  docs.push_back(testing::FortuneText("computers", 20000));
  for (const std::string& doc : docs) {
    std::vector<int32_t> ids;
    ASSERT_TRUE(t.Encode(doc, &ids).ok());
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size()) << id;
    auto back = t.Decode(ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, doc);
  }
}

TEST(SentencePieceTokenizer, TrainedBpeAndUnigramRoundTripEveryByteString) {
  for (const char* type : {"bpe", "unigram"}) {
    SCOPED_TRACE(type);
    std::unique_ptr<SentencePieceTokenizer> t = Train(type, 600);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->vocab_size(), 600);
    EXPECT_TRUE(t->exact_round_trip());
    // <|endoftext|> is a piece of its own, the end-of-text id; spelled out
    // in text it is ordinary bytes.
    EXPECT_EQ(t->Piece(t->eot_id()), kEndOfText);
    EXPECT_EQ(*t->Decode({t->eot_id()}), kEndOfText);
    std::vector<int32_t> eot;
    ASSERT_TRUE(t->Encode(kEndOfText, &eot).ok());
    EXPECT_EQ(eot.size(), std::strlen(kEndOfText));
    ExpectExactRoundTrip(*t);
    // A real subword vocabulary: English prose takes well under one id per
    // byte; an emoji it never saw falls back to its four bytes.
    const std::string prose = testing::FortuneText("computers", 20000);
    std::vector<int32_t> ids;
    ASSERT_TRUE(t->Encode(prose, &ids).ok());
    EXPECT_LT(ids.size(), prose.size() * 6 / 10);
    ids.clear();
    ASSERT_TRUE(t->Encode("\xF0\x9F\x9A\x80", &ids).ok());
    ASSERT_EQ(ids.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(*t->Decode({ids[i]}), std::string(1, "\xF0\x9F\x9A\x80"[i]));
  }
}

TEST(SentencePieceTokenizer, TrainingIsDeterministicAndFolderReloadsIt) {
  std::unique_ptr<SentencePieceTokenizer> a = Train("bpe", 500), b = Train("bpe", 500);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::string dir = ::testing::TempDir() + "/sp_folder";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(a->Save(dir).ok());
  auto loaded = LoadTokenizerFolder(dir, "test");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->kind(), "sentencepiece");
  nlohmann::json desc = nlohmann::json::parse(std::ifstream(dir + "/" + kTokenizerDescription));
  EXPECT_EQ(desc["files"]["model"], "tokenizer.model");
  EXPECT_EQ(desc["vocab_size"], 500);
  EXPECT_EQ(desc["eot_id"], a->eot_id());
  EXPECT_EQ(desc["round_trip"], "exact");
  for (const std::string& doc : testing::HardDocuments()) {
    std::vector<int32_t> x, y, z;
    ASSERT_TRUE(a->Encode(doc, &x).ok());
    ASSERT_TRUE(b->Encode(doc, &y).ok());
    ASSERT_TRUE((*loaded)->Encode(doc, &z).ok());
    EXPECT_EQ(x, y);
    EXPECT_EQ(x, z);
  }
}

TEST(SentencePieceTokenizer, NormalizingModelIsUsedAsSentencePieceUsesIt) {
  internal::SpTrainOptions o;
  o.model_type = "bpe";
  o.vocab_size = 400;
  o.normalization = "nmt_nfkc";
  o.add_dummy_prefix = true;
  o.user_defined_symbols = {kEndOfText};
  std::string serialized;
  ASSERT_EQ(internal::SpTrain(o, Lines(testing::FortuneText("linux", 30000)), &serialized), "");
  auto t = SentencePieceTokenizer::FromSerialized(serialized, "test");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->exact_round_trip());
  std::vector<int32_t> ids;
  ASSERT_TRUE((*t)->Encode("hello world", &ids).ok());
  EXPECT_EQ(*(*t)->Decode(ids), "hello world");
  ids.clear();
  ASSERT_TRUE((*t)->Encode("\xEF\xBD\x86\xEF\xBD\x95\xEF\xBD\x8C\xEF\xBD\x8C", &ids).ok());  // ｆｕｌｌ
  EXPECT_EQ(*(*t)->Decode(ids), "full");
}

TEST(SentencePieceTokenizer, ErrorsNameTheFileAndWhatIsWrong) {
  SentencePieceTrainOptions o;
  o.vocab_size = 100;
  auto small = TrainSentencePiece(o, Lines("a b c"), "--vocab-size 100");
  ASSERT_FALSE(small.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(small.status()));
  EXPECT_NE(small.status().message().find("--vocab-size 100"), std::string::npos) << small.status();
  EXPECT_NE(small.status().message().find("at least 260"), std::string::npos) << small.status();
  o.vocab_size = 50000;
  auto big = TrainSentencePiece(o, Lines("just a few words\n"), "--vocab-size 50000");
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_NE(big.status().message().find("SentencePiece"), std::string::npos) << big.status();
  o.model_type = "word";
  EXPECT_NE(TrainSentencePiece(o, Lines("x"), "--train-tokenizer").status().message().find("bpe or unigram"),
            std::string::npos);

  auto missing = SentencePieceTokenizer::FromFile("/no/such.model", "data.tokenizer.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "data.tokenizer.model: /no/such.model: cannot read the file");
  const std::string junk = ::testing::TempDir() + "/junk.model";
  testing::WriteFile(junk, "this is not a protobuf");
  auto bad = SentencePieceTokenizer::FromFile(junk, "--model");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("--model: " + junk + ": not a SentencePiece model"), std::string::npos)
      << bad.status();

  std::unique_ptr<SentencePieceTokenizer> t = Train("bpe", 400);
  ASSERT_NE(t, nullptr);
  auto out = t->Decode({5, 400});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("token id 400"), std::string::npos) << out.status();
}

}  // namespace
}  // namespace loom::runtime::data
