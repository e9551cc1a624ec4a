// The byte tokenizer, data.tokenizer validation and loading, and tokenizer
// folders (loom-tokenizer.json): what is accepted and how errors name the
// field, the file and the value.
#include "runtime/data/tokenizer.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/data/gpt2_tokenizer.h"
#include "runtime/data/testing/corpus.h"

namespace loom::runtime::data {
namespace {

using json = nlohmann::json;

TEST(ByteTokenizer, IdsAreBytesAndEveryStringRoundTrips) {
  std::unique_ptr<Tokenizer> t = MakeByteTokenizer();
  EXPECT_EQ(t->kind(), "bytes");
  EXPECT_EQ(t->vocab_size(), 256);
  EXPECT_EQ(t->eot_id(), -1);
  for (const std::string& doc : testing::HardDocuments()) {
    std::vector<int32_t> ids;
    ASSERT_TRUE(t->Encode(doc, &ids).ok());
    ASSERT_EQ(ids.size(), doc.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<uint8_t>(doc[i]));
    EXPECT_EQ(*t->Decode(ids), doc);
  }
  auto bad = t->Decode({65, 256});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token id 256"), std::string::npos);
}

v1::TokenizerSpec Spec(const std::string& kind, const std::string& model = "", const std::string& vocab = "",
                       const std::string& merges = "", const std::string& json_path = "", const std::string& dir = "") {
  v1::TokenizerSpec s;
  s.set_kind(kind);
  s.set_model(model);
  s.set_vocab(vocab);
  s.set_merges(merges);
  s.set_json(json_path);
  s.set_dir(dir);
  return s;
}

void ExpectInvalid(const v1::TokenizerSpec& s, const std::string& message) {
  absl::Status st = ValidateTokenizerSpec(s);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_EQ(st.message(), message);
  EXPECT_EQ(LoadTokenizer(s).status(), st);
}

TEST(TokenizerSpec, FieldsAreCheckedByKindAndErrorsNameThem) {
  const std::string file = ::testing::TempDir() + "/some.file";
  testing::WriteFile(file, "x");
  EXPECT_TRUE(ValidateTokenizerSpec(Spec("")).ok());
  EXPECT_TRUE(ValidateTokenizerSpec(Spec("bytes")).ok());
  EXPECT_TRUE(ValidateTokenizerSpec(Spec("", file)).ok());              // kind from the files
  EXPECT_TRUE(ValidateTokenizerSpec(Spec("", "", "", "", file)).ok());  // gpt2 from tokenizer.json
  ExpectInvalid(Spec("wordpiece"), "data.tokenizer.kind: expected bytes, sentencepiece or gpt2 (got wordpiece)");
  ExpectInvalid(Spec("sentencepiece"), "data.tokenizer.model: kind sentencepiece needs a .model file (got nothing)");
  ExpectInvalid(Spec("sentencepiece", "/no/such.model"), "data.tokenizer.model: no such file (got /no/such.model)");
  ExpectInvalid(Spec("gpt2", file), "data.tokenizer.model: applies to kind sentencepiece (got " + file + ")");
  ExpectInvalid(Spec("gpt2", "", file),
                "data.tokenizer.merges: kind gpt2 needs vocab.json and merges.txt (data.tokenizer.vocab, "
                "data.tokenizer.merges) or data.tokenizer.json (got nothing)");
  ExpectInvalid(Spec("gpt2", "", file, file, file),
                "data.tokenizer.json: give data.tokenizer.json or vocab and merges, not both (got " + file + ")");
  ExpectInvalid(Spec("bytes", "", file), "data.tokenizer.vocab: applies to kind gpt2 (got " + file + ")");
  ExpectInvalid(Spec("", file, "", "", "", "/some/dir"),
                "data.tokenizer.model: give data.tokenizer.dir or the files, not both (got " + file + ")");
  ExpectInvalid(Spec("", "", "", "", "", "/no/dir"),
                "data.tokenizer.dir: no such file (got /no/dir/loom-tokenizer.json)");
}

// A GPT-2 tokenizer with a few merges, saved as a folder.
std::string SavedGpt2Folder(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir + "/src");
  std::filesystem::create_directories(dir + "/folder");
  const std::array<uint32_t, 256> alphabet = Gpt2ByteAlphabet();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    if (alphabet[b] < 0x80) {
      s.push_back(static_cast<char>(alphabet[b]));
    } else {
      s.push_back(static_cast<char>(0xC0 | (alphabet[b] >> 6)));
      s.push_back(static_cast<char>(0x80 | (alphabet[b] & 0x3F)));
    }
    vocab[s] = b;
  }
  vocab["th"] = 256;
  vocab[kEndOfText] = 257;
  testing::WriteFile(dir + "/src/vocab.json", vocab.dump());
  testing::WriteFile(dir + "/src/merges.txt", "#version: 0.2\nt h\n");
  auto t = Gpt2Tokenizer::FromFiles(dir + "/src/vocab.json", "v", dir + "/src/merges.txt", "m");
  EXPECT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->Save(dir + "/folder").ok());
  return dir + "/folder";
}

// model.vocab must cover a tokenizer the spec names; an unset data.tokenizer
// is the bytes tokenizer for any vocabulary (token ids of a small model).
TEST(JobTokenizer, NamedTokenizersAreCheckedAgainstModelVocab) {
  v1::JobSpec job;
  job.mutable_model()->set_vocab(32);
  job.mutable_data()->set_format("tokens");
  auto unset = LoadJobTokenizer(job);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ((*unset)->kind(), "bytes");
  job.mutable_data()->mutable_tokenizer()->set_kind("bytes");
  EXPECT_EQ(LoadJobTokenizer(job).status().message(),
            "model.vocab: 32 is smaller than the 256 ids of data.tokenizer (bytes: 256 ids (id = byte value), no "
            "end-of-text id)");
  job.mutable_model()->set_vocab(256);
  EXPECT_TRUE(LoadJobTokenizer(job).ok());
  job.mutable_data()->mutable_tokenizer()->Clear();
  job.mutable_data()->mutable_tokenizer()->set_dir(SavedGpt2Folder("job_gpt2"));  // 258 ids
  EXPECT_NE(LoadJobTokenizer(job).status().message().find("model.vocab: 256 is smaller than the 258 ids"),
            std::string::npos);
  job.mutable_model()->set_vocab(258);
  EXPECT_TRUE(LoadJobTokenizer(job).ok());
  job.mutable_data()->set_format("text");
  EXPECT_NE(LoadJobTokenizer(job).status().message().find("data.format: text reads bytes as ids"), std::string::npos);
}

TEST(TokenizerFolder, SavedFolderLoadsFromTheSpecAndChecksItsDescription) {
  const std::string folder = SavedGpt2Folder("gpt2_folder");
  json desc = json::parse(std::ifstream(folder + "/loom-tokenizer.json"));
  EXPECT_EQ(desc["format"], "loom-tokenizer");
  EXPECT_EQ(desc["kind"], "gpt2");
  EXPECT_EQ(desc["files"], json({{"vocab", "vocab.json"}, {"merges", "merges.txt"}}));
  EXPECT_EQ(desc["vocab_size"], 258);
  EXPECT_EQ(desc["eot_id"], 257);
  EXPECT_EQ(desc["round_trip"], "exact");
  for (const std::string& dir : {folder, folder + "/loom-tokenizer.json"}) {
    auto t = LoadTokenizer(Spec("", "", "", "", "", dir));
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<int32_t> ids;
    ASSERT_TRUE((*t)->Encode("the", &ids).ok());
    EXPECT_EQ(ids, (std::vector<int32_t>{256, 'e'}));
  }
  auto wrong_kind = LoadTokenizer(Spec("sentencepiece", "", "", "", "", folder));
  ASSERT_FALSE(wrong_kind.ok());
  EXPECT_NE(wrong_kind.status().message().find("holds a gpt2 tokenizer"), std::string::npos) << wrong_kind.status();

  auto rewrite = [&](const json& d) {
    testing::WriteFile(folder + "/loom-tokenizer.json", d.dump());
    return LoadTokenizerFolder(folder, "data.tokenizer.dir").status();
  };
  const std::string where = "data.tokenizer.dir: " + folder + "/loom-tokenizer.json: ";
  json d = desc;
  d["vocab_size"] = 300;
  EXPECT_EQ(rewrite(d).message(), where + "vocab_size: the description says 300, the files hold 258 ids");
  d = desc;
  d["version"] = 2;
  EXPECT_EQ(rewrite(d).message(), where + "version: expected 1, got 2");
  d = desc;
  d["files"]["merges"] = "gone.txt";
  EXPECT_EQ(rewrite(d).message(), where + "files.merges: no such file (got " + folder + "/gone.txt)");
  // Files are named inside the folder: no path leads elsewhere (the folder is
  // what confinement checks, runtime/jobspec/confine.h).
  for (const std::string& name : {std::string("../src/merges.txt"), folder + "/merges.txt", std::string("sub/m.txt"),
                                  std::string(".."), std::string("")}) {
    d = desc;
    d["files"]["merges"] = name;
    EXPECT_EQ(rewrite(d).message(), where + "files.merges: expected a file name inside the folder, without '/' (got '" +
                                        name + "')");
  }
  testing::WriteFile(folder + "/loom-tokenizer.json", "{");
  EXPECT_NE(LoadTokenizerFolder(folder, "--tokenizer-dir").status().message().find("malformed JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::runtime::data
