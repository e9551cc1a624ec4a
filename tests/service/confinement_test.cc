// Where jobs may read and write, end to end with the real `loom` binary: a
// coordinator started with no path flags confines every spec path to its run
// root (<data-dir>/runs) and the --data-roots it was given, follows symlinks
// before it checks, and takes only folder-safe job names; a job without a
// run_dir gets <run root>/<name>-<job id>. The worker checks the paths again
// against the roots its agent passes it (LOOM_ALLOWED_ROOTS). data.tokenizer's
// files and folder are confined the same way.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::service::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Confinement : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::canonical(runtime::service::testing::TestDir("confinement")).string();
    data_ = root_ + "/coord";
    std::filesystem::create_directories(root_ + "/data");
    std::ofstream(root_ + "/data/corpus.txt") << std::string(4096, 'a');
    std::filesystem::create_symlink("/etc/passwd", root_ + "/data/innocent.txt");
    coord_ = runtime::service::testing::Spawn(
        {"runtime/loom", "coordinator", "--data-dir", data_, "--listen", "127.0.0.1:0", "--metrics-listen", "off",
         "--port-file", root_ + "/port", "--data-roots", root_ + "/data"},
        root_ + "/coord.log");
    const int port = runtime::service::testing::ReadPort(root_ + "/port", 20);
    ASSERT_GT(port, 0) << ReadAll(root_ + "/coord.log");
    cli_ = absl::StrCat(" --coordinator 127.0.0.1:", port, " --data-dir ", data_);
  }

  void TearDown() override {
    if (coord_ > 0) {
      kill(coord_, SIGTERM);
      runtime::service::testing::WaitExit(coord_, 10);
    }
  }

  // `loom submit` of a job spec whose lines are `yaml` (plus a tiny model).
  tests::testing::CliResult Submit(const std::string& name, const std::string& yaml) {
    const std::string path = absl::StrCat(root_, "/job-", ++n_, ".yaml");
    std::ofstream(path) << "name: " << name
                        << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n" << yaml;
    return tests::testing::RunLoom(absl::StrCat("submit ", path, " --wait-for-capacity --key k", n_, cli_), 60);
  }

  std::string root_, data_, cli_;
  pid_t coord_ = -1;
  int n_ = 0;
};

TEST_F(Confinement, SpecPathsStayInsideTheRunRootAndDataRoots) {
  struct Case {
    std::string name, yaml, needle;
  };
  const std::vector<Case> refused = {
      {"shadow", "data: {path: /etc/shadow}\n", "spec.data.path: '/etc/shadow' is outside the allowed roots"},
      {"link", absl::StrCat("data: {path: ", root_, "/data/innocent.txt}\n"), "it resolves to /etc/passwd"},
      {"runs-out", "run_dir: /tmp/elsewhere\n", "spec.run_dir: '/tmp/elsewhere' is outside"},
      {"dotdot", absl::StrCat("run_dir: ", data_, "/runs/../../x\n"), "spec.run_dir: '..' is not allowed"},
      {"ckpt-link", absl::StrCat("checkpoint: {every: 1, dir: ", root_, "/data/innocent.txt/ck}\n"),
       "spec.checkpoint.dir"},
      {"init", "init_from: /etc/passwd\n", "spec.init_from: '/etc/passwd' is outside"},
      {"tok-dir", absl::StrCat("data: {path: ", root_, "/data/corpus.txt, tokenizer: {dir: ", root_, "/outside}}\n"),
       "spec.data.tokenizer.dir: '" + root_ + "/outside' is outside the allowed roots"},
      {"tok-link", absl::StrCat("data: {path: ", root_, "/data/corpus.txt, tokenizer: {dir: ", root_, "/data/tok}}\n"),
       "spec.data.tokenizer.dir: '" + root_ + "/data/tok/vocab.json' is outside"},
      {"'../../x'", "", "spec.name: must match [a-z0-9][a-z0-9._-]{0,62}"},
      {"Upper", "", "spec.name"},
  };
  // Tokenizer folders (the bytes kind, so that `loom submit`'s own check of
  // the spec reads no file): one outside the roots, one inside with a link
  // that leads out.
  const std::string bytes_tokenizer = R"({"format": "loom-tokenizer", "version": 1, "kind": "bytes", "files": {}})";
  for (const std::string& dir : {root_ + "/outside", root_ + "/data/tok"}) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/loom-tokenizer.json") << bytes_tokenizer;
  }
  std::filesystem::create_symlink("/etc/passwd", root_ + "/data/tok/vocab.json");
  for (const Case& c : refused) {
    tests::testing::CliResult r = Submit(c.name, c.yaml);
    EXPECT_EQ(r.code, 2) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.name << ": " << r.output;
  }
  tests::testing::CliResult r = tests::testing::RunLoom("jobs --json" + cli_, 30);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("job-"), std::string::npos) << "a refused spec was stored: " << r.output;

  for (const std::string& yaml : std::vector<std::string>{absl::StrCat("data: {path: ", root_, "/data/corpus.txt}\n"),
                                 absl::StrCat("run_dir: ", data_, "/runs/mine\n")}) {
    r = Submit("fine", yaml);
    EXPECT_EQ(r.code, 0) << yaml << r.output;
  }
}

// The worker refuses what its roots do not hold, whatever the coordinator saw:
// here a data file that became a symlink out of the root after submission,
// and a tokenizer file outside the roots.
TEST_F(Confinement, WorkerChecksPathsAgainstItsRoots) {
  const std::string data = "data: {path: " + root_ + "/data/";
  struct Case {
    std::string data, needle;
  };
  for (const Case& c : std::vector<Case>{
           {data + "innocent.txt}", "data.path: '" + root_ + "/data/innocent.txt' is outside"},
           {data + "corpus.txt, tokenizer: {vocab: /etc/passwd, merges: /etc/passwd}}",
            "data.tokenizer.vocab: '/etc/passwd' is outside"},
       }) {
    std::ofstream(root_ + "/worker.yaml") << "name: w\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, "
                                            "seq_len: 16}\n"
                                         << c.data << "\n";
    const std::string env = absl::StrCat("LOOM_JOB_SPEC=", root_, "/worker.yaml LOOM_RANK=0 LOOM_WORLD_SIZE=1 ",
                                         "LOOM_ERROR_FILE=", root_, "/worker.error LOOM_ALLOWED_ROOTS=", root_,
                                         "/data:", data_, "/runs ");
    tests::testing::CliResult r =
        tests::testing::Shell("cd " + root_ + " && " + env + " timeout 60 " + std::filesystem::current_path().string() +
                              "/runtime/loom worker");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(ReadAll(root_ + "/worker.error").find(c.needle), std::string::npos) << ReadAll(root_ + "/worker.error");
  }
}

}  // namespace
}  // namespace loom::tests::service::testing
