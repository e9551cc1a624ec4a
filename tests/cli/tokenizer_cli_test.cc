// `loom data prepare` and `loom sample` as a user runs them: the real binary,
// its exit codes and output. A prepared SentencePiece dataset trains a
// model whose samples come out as text, and `loom sample` continues a
// prompt from the run folder, the same text for the same seed. Bad input
// exits 2 naming the file and the flag or field.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/loom_cli.h"

namespace {

namespace fs = std::filesystem;
using loom::tests::testing::CliResult;
using loom::tests::testing::RunLoom;

std::string Temp(const std::string& name) {
  const std::string p = absl::StrCat(::testing::TempDir(), "/", name);
  fs::remove_all(p);
  return p;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

const char kFortunes[] = "/usr/share/games/fortunes/computers /usr/share/games/fortunes/linux";

void ExpectBadInput(const std::string& args, const std::vector<std::string>& needles) {
  CliResult r = RunLoom(args, 60);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
  for (const std::string& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n << " not in: " << r.output;
}

TEST(DataPrepareCli, SameShardsOnOneAndTwoThreadsWithASummary) {
  std::string out[2];
  for (int threads : {1, 2}) {
    out[threads - 1] = Temp(absl::StrCat("prep_cli", threads));
    CliResult r = RunLoom(absl::StrCat("data prepare --input ", kFortunes, " --documents line=% --out ",
                                       out[threads - 1], " --train-tokenizer unigram --vocab-size 1000 ",
                                       "--val-fraction 0.1 --shard-tokens 40000 --threads ", threads, " --progress"),
                          120);
    ASSERT_EQ(r.code, 0) << r.output;
    for (const char* needle : {"documents: ", "validation", "train in ", "shards", "tokens/s", "on 2 threads"}) {
      if (threads == 2 || std::string(needle) != "on 2 threads") {
        EXPECT_NE(r.output.find(needle), std::string::npos) << needle << " not in: " << r.output;
      }
    }
    EXPECT_NE(r.output.find("100.0%"), std::string::npos) << "the progress bar: " << r.output;
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(out[0])) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(Read(e.path().string()) == Read(out[1] + "/" + name)) << name << " differs between 1 and 2 threads";
    ++files;
  }
  EXPECT_GE(files, 6);  // >= 2 train shards, a val shard, the tokenizer's two files, dataset.json
}

TEST(DataPrepareCli, BadInputExits2NamingTheFileAndFlag) {
  const std::string in = Temp("prep_cli_bad");
  fs::create_directories(in);
  Write(in + "/text.txt", "some text\n");
  Write(in + "/empty.txt", "");
  Write(in + "/vocab.json", "{\"a\": 0,");
  Write(in + "/merges.txt", "#version: 0.2\na b c\n");
  const std::string out = " --out " + Temp("prep_cli_bad_out");
  ExpectBadInput("data prepare" + out, {"--input", "give at least one text file"});
  ExpectBadInput("data prepare --input " + in + "/nope.txt" + out, {"--input", in + "/nope.txt", "cannot open"});
  ExpectBadInput("data prepare --input " + in + "/empty.txt" + out, {"--input", "empty.txt", "empty"});
  ExpectBadInput("data prepare --input " + in + "/text.txt --model " + in + "/none.model" + out,
                 {"--model: no such file", in + "/none.model"});
  ExpectBadInput("data prepare --input " + in + "/text.txt --vocab " + in + "/vocab.json --merges " + in +
                     "/merges.txt" + out,
                 {"--vocab: " + in + "/vocab.json: malformed JSON"});
  Write(in + "/vocab.json", "{}");
  ExpectBadInput("data prepare --input " + in + "/text.txt --tokenizer-json " + in + "/vocab.json" + out,
                 {"--tokenizer-json: " + in + "/vocab.json: model: missing"});
  ExpectBadInput("data prepare --input " + in + "/text.txt --train-tokenizer bpe --vocab-size 300 --dtype u8" + out,
                 {"--dtype", "u8"});
  ExpectBadInput("data prepare --input " + in + "/text.txt --threads many" + out, {"--threads", "many"});
  ExpectBadInput("data prepare --input " + in + "/text.txt --frobnicate 1" + out, {"unknown flag --frobnicate"});
  ExpectBadInput("data frobnicate", {"unknown subcommand"});
}

// A SentencePiece BPE tokenizer of 600 ids and raw u16 shards of the
// fortunes, prepared once for the tests below.
const std::string& Prepared() {
  static const std::string* prep = [] {
    auto* dir = new std::string(Temp("sample_prep"));
    CliResult p = RunLoom(absl::StrCat("data prepare --input ", kFortunes, " --documents line=% --out ", *dir,
                                       " --train-tokenizer bpe --vocab-size 600 --format raw --threads 2"),
                          120);
    EXPECT_EQ(p.code, 0) << p.output;
    return dir;
  }();
  return *prep;
}

TEST(SampleCli, PreparedTokenizerTrainsDecodesSamplesAndContinuesPrompts) {
  const std::string prep = Prepared();
  const std::string dir = Temp("sample_run");
  fs::create_directories(dir);
  const std::string shard = prep + "/train_000000.bin";  // raw u16 ids, which data.format tokens reads
  const std::string job = dir + "/job.yaml";
  auto write_job = [&](int vocab) {
    Write(job, absl::StrCat("name: sp\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 32, vocab: ",
                            vocab, "}\ndata: {path: ", shard, ", format: tokens, tokenizer: {dir: ", prep,
                            "}}\ntrain: {steps: 20, batch_size: 4, eval_every: 20, eval_batches: 1, ",
                            "sample_tokens: 16, lr: 3e-3}\nrun_dir: ", dir, "/run\n"));
  };
  write_job(512);  // smaller than the tokenizer's 600 ids
  ExpectBadInput("train " + job, {"model.vocab: 512 is smaller than the 600 ids of data.tokenizer"});
  write_job(640);
  CliResult t = RunLoom("train " + job, 300);
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_TRUE(fs::exists(dir + "/run/tokenizer/loom-tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir + "/run/tokenizer/tokenizer.model"));
  const std::string sample = Read(dir + "/run/sample.txt");
  EXPECT_EQ(sample.find("token ids"), std::string::npos) << sample;
  EXPECT_GT(sample.size(), 16u) << sample;  // 16 subword tokens and the prompt, as text

  const std::string args = "sample " + dir + "/run --prompt 'The computer' --tokens 12";
  CliResult a = RunLoom(args + " --seed 7", 120), b = RunLoom(args + " --seed 7", 120);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output.rfind("The computer", 0), 0u) << a.output;
  EXPECT_GT(a.output.size(), std::string("The computer\n").size());
  EXPECT_EQ(a.output, b.output);
  CliResult g1 = RunLoom(args + " --temperature 0", 120), g2 = RunLoom(args + " --temperature 0 --seed 9", 120);
  ASSERT_EQ(g1.code, 0) << g1.output;
  EXPECT_EQ(g1.output, g2.output);  // greedy ignores the seed
  // The same ids without data.tokenizer: the bytes tokenizer has no text
  // for them, so the sample shows the ids.
  Write(job, absl::StrCat("model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 32, vocab: 640}\n",
                          "data: {path: ", shard, ", format: tokens}\ntrain: {steps: 2, batch_size: 4, ",
                          "eval_every: 2, eval_batches: 1, sample_tokens: 4}\nrun_dir: ", dir, "/ids\n"));
  CliResult ids = RunLoom("train " + job, 300);
  ASSERT_EQ(ids.code, 0) << ids.output;
  EXPECT_EQ(Read(dir + "/ids/sample.txt").rfind("token ids (data.tokenizer, bytes, has no text for ids of 256", 0), 0u)
      << Read(dir + "/ids/sample.txt");

  ExpectBadInput("sample " + dir + "/run --tokens 3", {"--prompt"});
  ExpectBadInput("sample " + dir + "/run --prompt x --temperature hot", {"--temperature", "hot"});
  ExpectBadInput("sample " + dir + "/nothing --prompt x", {dir + "/nothing", "not a run folder or a checkpoint"});
  ExpectBadInput("sample " + dir + "/run --prompt x --tokenizer-dir " + dir, {"--tokenizer-dir", "loom-tokenizer.json"});
}

// loom run: rank 0 decodes its sample with the job's tokenizer, and
// loom sample reads the checkpoint the run wrote: greedy text from the final
// checkpoint equals greedy text from the run folder's final parameters. The
// data are llm.c shards (prepare's default format, with the tokenizer of
// Prepared()), read by a glob with data.format auto.
TEST(SampleCli, RunDecodesItsSampleAndCheckpointsSample) {
  const std::string prep = Temp("sample_llmc");
  CliResult p = RunLoom(absl::StrCat("data prepare --input ", kFortunes, " --documents line=% --out ", prep,
                                     " --tokenizer-dir ", Prepared(), " --shard-tokens 40000 --threads 2"),
                        120);
  ASSERT_EQ(p.code, 0) << p.output;
  ASSERT_TRUE(fs::exists(prep + "/train_000001.bin")) << p.output;  // more than one shard
  const std::string dir = Temp("sample_ckpt");
  fs::create_directories(dir);
  Write(dir + "/job.yaml",
        absl::StrCat("name: spr\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 32, vocab: 640}\n",
                     "data: {path: '", prep, "/train_*.bin', tokenizer: {dir: ", prep, "}}\n",
                     "train: {steps: 4, batch_size: 4, eval_every: 4, eval_batches: 1, sample_tokens: 8}\n",
                     "checkpoint: {every: 2, dir: ", dir, "/ckpt}\n"));
  CliResult r = RunLoom("run " + dir + "/job.yaml --run-dir " + dir + "/run", 300);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/run/tokenizer/loom-tokenizer.json"));
  const std::string sample = Read(dir + "/run/sample.txt");
  EXPECT_FALSE(sample.empty());
  EXPECT_EQ(sample.find("token ids"), std::string::npos) << sample;
  const std::string args = " --prompt 'A computer' --tokens 10 --temperature 0";
  CliResult from_run = RunLoom("sample " + dir + "/run" + args, 120);
  CliResult from_ckpt = RunLoom("sample " + dir + "/ckpt" + args, 120);
  CliResult with_dir = RunLoom("sample " + dir + "/ckpt" + args + " --tokenizer-dir " + dir + "/run/tokenizer", 120);
  ASSERT_EQ(from_run.code, 0) << from_run.output;
  ASSERT_EQ(from_ckpt.code, 0) << from_ckpt.output;
  EXPECT_EQ(from_ckpt.output, from_run.output);
  EXPECT_EQ(with_dir.output, from_run.output);
}

}  // namespace
