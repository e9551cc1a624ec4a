// The data path as a user meets it: `loom train`, `loom run` and
// `loom submit` on bad data (exit 2, the file and the field named, before any
// training), and short `loom train` runs of every batch kind (causal windows
// from llm.c shards with validation shards, mlm, npy pairs), each reporting a
// validation loss.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/data/testing/files.h"
#include "tests/testing/loom_cli.h"

namespace {

namespace fs = std::filesystem;
using loom::runtime::data::testing::Llmc;
using loom::runtime::data::testing::Npy;
using loom::runtime::data::testing::Raw;
using loom::runtime::data::testing::Write;
using loom::tests::testing::RunLoom;

std::string Dir(const std::string& name) {
  const std::string d = absl::StrCat(::testing::TempDir(), "/datacli_", name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<uint32_t> Chain(int n, uint32_t seed) {
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = seed = (seed * 37 + 11) % 251;
  return v;
}

constexpr const char* kModel = "model: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16, vocab: 256}\n";
constexpr const char* kTrain =
    "train: {steps: 4, batch_size: 4, eval_every: 4, eval_batches: 2, sample_tokens: 8, log_every: 1}\n";

std::string JobFile(const std::string& name, const std::string& data_yaml) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/datacli_", name, ".yaml");
  std::ofstream(path) << kModel << kTrain << data_yaml << "run_dir: " << ::testing::TempDir() << "/datacli_run_"
                      << name << "\n";
  return path;
}

void ExpectExit2(const std::string& cmd, const std::vector<std::string>& needles) {
  auto r = RunLoom(cmd, 120);
  EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
  for (const std::string& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n << " not in: " << r.output;
  EXPECT_EQ(r.output.find("compiling"), std::string::npos) << "bad data must stop before compiling: " << r.output;
}

TEST(DataCli, BadDataExits2NamingFileAndField) {
  const std::string d = Dir("bad");
  fs::create_directories(d + "/empty");
  Write(d + "/mixed_0.bin", Llmc(Chain(100, 1)));
  Write(d + "/mixed_1.bin", Npy("<u2", {3}, Raw(std::vector<uint16_t>{1, 2, 3})));
  Write(d + "/magic.bin", Llmc(Chain(100, 1), 20240519));
  std::vector<uint32_t> ids = Chain(200, 3);
  ids[150] = 300;  // >= model.vocab 256
  Write(d + "/vocab.bin", Llmc(ids));
  Write(d + "/zero.bin", "");
  struct Case {
    std::string data, needle_a, needle_b;
  };
  const std::vector<Case> cases = {
      {"data: {path: '" + d + "/empty'}", "data.path", "holds no data files"},
      {"data: {path: '" + d + "/mixed_*'}", "mixed formats", "mixed_1.bin is npy"},
      {"data: {path: '" + d + "/magic.bin', format: llmc}", "magic.bin", "header[0] (magic, byte offset 0)"},
      {"data: {path: '" + d + "/vocab.bin'}", "vocab.bin: token id 300 at byte offset 1324", "model.vocab = 256"},
      {"data: {path: '" + d + "/zero.bin'}", "zero.bin", "empty file (0 bytes)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string job = JobFile(absl::StrCat("bad", i), cases[i].data + "\n");
    ExpectExit2("train " + job, {cases[i].needle_a, cases[i].needle_b});
  }
  // `loom run`: the workers check the data before compiling (a configuration
  // error: exit 2, not retried); `loom submit` checks before it contacts a
  // coordinator.
  const std::string vocab_job = JobFile("bad_run", cases[3].data + "\n");
  ExpectExit2("run " + vocab_job, {"rank 0: data.path: ", "vocab.bin: token id 300"});
  ExpectExit2("submit " + vocab_job + " --coordinator 127.0.0.1:1", {"vocab.bin: token id 300"});
}

TEST(DataCli, EveryBatchKindTrainsAndReportsValidationLoss) {
  const std::string d = Dir("kinds");
  for (int k = 0; k < 3; ++k) Write(absl::StrCat(d, "/train_", k, ".bin"), Llmc(Chain(600, 5 + k)));
  Write(d + "/val_0.bin", Llmc(Chain(300, 99)));
  const int N = 64, T = 16;
  std::vector<int32_t> x(N * T), y(N * T);
  std::vector<uint32_t> chain = Chain(N * T + 1, 7);
  for (int i = 0; i < N * T; ++i) {
    x[i] = static_cast<int32_t>(chain[i]);
    y[i] = static_cast<int32_t>(chain[i + 1]);
  }
  Write(d + "/x.npy", Npy("<i4", {N, T}, Raw(x)));
  Write(d + "/y.npy", Npy("<i4", {N, T}, Raw(y)));
  struct Case {
    std::string name, data;
    bool causal;
  };
  for (const Case& c : std::vector<Case>{
           {"causal", "data: {path: '" + d + "/train_*.bin', val: '" + d + "/val_*.bin'}", true},
           {"mlm", "data: {path: '" + d + "/train_*.bin', kind: mlm, mlm: {mask_token: 255}}", false},
           {"pairs", "data: {path: '" + d + "/x.npy', labels: '" + d + "/y.npy', kind: pairs}", false},
       }) {
    auto r = RunLoom("train " + JobFile(c.name, c.data + "\n"), 120);
    ASSERT_EQ(r.code, 0) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find("step 4: validation loss"), std::string::npos) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find("final validation loss"), std::string::npos) << c.name << ": " << r.output;
    EXPECT_EQ(r.output.find("sample:") != std::string::npos, c.causal) << c.name << ": " << r.output;
    EXPECT_EQ(r.output.find("bigram baseline validation loss") != std::string::npos, c.causal)
        << c.name << ": " << r.output;
  }
}

}  // namespace
