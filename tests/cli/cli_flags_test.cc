// The `loom` binary's command line as a whole (issue #24 item 7), each case
// one that the binary before base/flags.h failed:
//   - `loom X --help` exits 0 with the usage on stdout for every command in
//     main.cc's table (train, compile, sample, run, worker, submit, jobs,
//     status, cancel, logs, export, import, checkpoint, demo and ops exited 2);
//     the table is read from `loom --help`, so a new command without --help
//     fails here;
//   - `loom --version` (was "unknown command", exit 2);
//   - an unknown flag on any command is exit 2 naming it, with the nearest
//     flag suggested (the client commands ignored unknown flags);
//   - `--flag=value` on `loom train` and `loom run` (both refused it);
//   - `loom run --json` writes its JSON lines to stdout (they went to stderr);
//   - `loom completion bash` (absent).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/loom_cli.h"

namespace {

using loom::tests::testing::CliResult;
using loom::tests::testing::RunLoom;
using loom::tests::testing::Shell;

std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/", name); }

// `loom ARGS` with stdout only (stderr to `err_file` when given).
CliResult Stdout(const std::string& args, const std::string& err_file = "/dev/null", int timeout_s = 120) {
  return Shell(absl::StrCat("(timeout ", timeout_s, " runtime/loom ", args, " 2>", err_file, ")"));
}

std::string Read(const std::string& path) {
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  return ss.str();
}

// The command names `loom --help` lists (main.cc's table).
std::vector<std::string> Commands() {
  CliResult r = Stdout("--help");
  EXPECT_EQ(r.code, 0) << r.output;
  std::vector<std::string> names;
  bool in_list = false;
  for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
    if (line == "commands:") in_list = true;
    else if (in_list && line.size() > 2 && line.substr(0, 2) == "  ")
      names.emplace_back(std::vector<std::string>(absl::StrSplit(line.substr(2), ' '))[0]);
  }
  return names;
}

std::string Job(const std::string& name) {
  std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name
                      << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                         "train: {steps: 5, batch_size: 4, eval_every: 5, eval_batches: 1}\n";
  return path;
}

TEST(CliFlags, HelpOnEveryCommandInTheTable) {
  std::vector<std::string> names = Commands();
  ASSERT_GE(names.size(), 20u);
  for (const std::string& cmd : names) {
    const std::string err = Tmp("help_" + cmd + ".err");
    CliResult r = Stdout(cmd + " --help", err, 30);
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.output << Read(err);
    EXPECT_EQ(r.output.rfind("usage: loom " + cmd, 0), 0u) << cmd << ": " << r.output;
    EXPECT_EQ(Read(err), "") << cmd;
    EXPECT_EQ(Stdout(cmd + " -h", "/dev/null", 30).output, r.output) << cmd;
  }
}

TEST(CliFlags, Version) {
  for (const char* args : {"--version", "version"}) {
    CliResult r = Stdout(args);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("loom 0.", 0), 0u) << r.output;
    EXPECT_NE(r.output.find("\nbuild: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\ncuda: "), std::string::npos) << r.output;
  }
}

TEST(CliFlags, UnknownFlagIsExit2OnEveryCommand) {
  for (const std::string& cmd : Commands()) {
    CliResult r = RunLoom(cmd + " --no-such-flag-anywhere", 30);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("--no-such-flag-anywhere"), std::string::npos) << cmd << ": " << r.output;
  }
  struct Case {
    std::string args, want;
  };
  const std::string job = Job("typo");
  for (const Case& c : std::vector<Case>{
           {"train " + job + " --step 3", "unknown flag --step (did you mean --steps?)"},
           {"run " + job + " --nproc-per-nod=2", "unknown flag --nproc-per-nod (did you mean --nproc-per-node?)"},
           {"run " + job + " --jsn", "unknown flag --jsn (did you mean --json?)"},
           {"jobs --stat running", "unknown flag --stat (did you mean --state?)"},
           {"submit " + job + " --wach", "unknown flag --wach (did you mean --watch?)"},
           {"agent --cordinator 127.0.0.1:1", "unknown flag --cordinator (did you mean --coordinator?)"},
           {"coordinator --lisen 127.0.0.1:0", "unknown flag --lisen (did you mean --listen?)"},
           {"ops --onx", "unknown flag --onx (did you mean --onnx?)"},
           {"train " + job + " --steps=0", "--steps: expected a positive integer, got '0'"},
           {"run " + job + " --max-restarts=-1", "--max-restarts: expected a non-negative integer, got '-1'"},
           {"run", "missing JOB.yaml"},
       }) {
    CliResult r = RunLoom(c.args, 30);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << c.args << ": " << r.output;
  }
}

TEST(CliFlags, BothFlagFormsOnTrain) {
  const std::string job = Job("forms");
  for (const std::string& steps : {"--steps=2", "--steps 2"}) {
    CliResult r = RunLoom(absl::StrCat("train ", job, " ", steps, " --init=", Tmp("none.safetensors")), 120);
    // --init=FILE is parsed (the missing file is the error, not the flag).
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("none.safetensors"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("unknown flag"), std::string::npos) << r.output;
    r = RunLoom(absl::StrCat("train ", steps, " ", job), 300);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("step 2/2"), std::string::npos) << r.output;
  }
}

TEST(CliFlags, RunJsonGoesToStdoutAndTakesBothForms) {
  const std::string job = Job("json");
  const std::string err = Tmp("run_json.err");
  CliResult r = Stdout(absl::StrCat("run ", job, " --steps=2 --nproc-per-node=1 --json --run-dir=", Tmp("json_run")),
                       err, 300);
  ASSERT_EQ(r.code, 0) << r.output << Read(err);
  std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u) << r.output;
  for (const std::string& line : lines) EXPECT_EQ(line.rfind("{\"job_id\":", 0), 0u) << line;
  EXPECT_NE(lines.back().find("\"state\":\"SUCCEEDED\""), std::string::npos) << lines.back();
  EXPECT_NE(Read(err).find("step 2/2"), std::string::npos) << Read(err);  // rank 0's output: stderr
}

TEST(CliFlags, BashCompletion) {
  const std::string script = Tmp("loom.bash");
  ASSERT_EQ(Stdout("completion bash > " + script).code, 0);
  auto complete = [&](const std::string& words, int cword) {
    return Shell(absl::StrCat("bash -c 'source ", script, " && COMP_WORDS=(", words, ") && COMP_CWORD=", cword,
                              " && _loom && echo \"${COMPREPLY[*]}\"'"));
  };
  CliResult r = Shell("bash -c 'source " + script + " && complete -p loom'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("-F _loom loom"), std::string::npos) << r.output;
  EXPECT_EQ(complete("loom jo", 1).output, "jobs\n");
  EXPECT_EQ(complete("loom co", 1).output, "compile coordinator completion\n");
  EXPECT_EQ(complete("loom --ver", 1).output, "--version\n");
  EXPECT_EQ(complete("loom run job.yaml --nproc", 3).output, "--nproc-per-node\n");
  EXPECT_EQ(complete("loom jobs --st", 2).output, "--state\n");
  EXPECT_EQ(complete("loom agent --rdzv", 2).output, "--rdzv-endpoint\n");
  EXPECT_EQ(complete("loom ops --no", 2).output, "--no-onnx\n");
  EXPECT_EQ(complete("loom train jo", 2).output, "\n");  // not a flag: left to file completion
  EXPECT_EQ(Stdout("completion zsh").code, 2);
}

}  // namespace
