// A `loom coordinator --backend slurm` child process and the `loom` CLI
// pointed at it, for the tests of the Slurm backend (SLURM_CONF comes from
// the SlurmCluster fixture, set in this process and inherited).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/service/testing/daemons.h"
#include "tests/testing/loom_cli.h"
#include "tests/testing/processes.h"

namespace loom::tests::slurm {

namespace daemons = runtime::service::testing;
using Clock = std::chrono::steady_clock;

inline std::string Tmp(const std::string& name) { return absl::StrCat(::testing::TempDir(), "/", name); }
inline std::string Loom() { return std::filesystem::absolute("runtime/loom").string(); }

// A few KiB of text: every job's data (small, so that `loom submit`'s data
// check and each run's start are quick).
inline std::string TinyText() {
  const std::string path = Tmp("data/tiny.txt");
  if (!std::filesystem::exists(path)) {
    std::filesystem::create_directories(Tmp("data"));
    std::ofstream out(path);
    for (int i = 0; i < 200; ++i) out << "line " << i << ": the quick brown fox jumps over the lazy dog.\n";
  }
  return path;
}

// A tiny GPT job; `extra` adds top-level keys.
inline std::string Spec(const std::string& name, int dp, int steps, const std::string& extra = "") {
  const std::string path = Tmp(name + ".yaml");
  std::ofstream(path) << "name: " << name << "\nmodel: {family: gpt, n_layer: 1, n_head: 2, d_model: 32, seq_len: 16}\n"
                      << "data: {path: " << TinyText()
                      << "}\n"
                         "train: {steps: "
                      << steps
                      << ", log_every: 1, batch_size: 4, eval_every: 1000000, eval_batches: 1, sample_tokens: 0}\n"
                         "parallel: {dp: "
                      << dp << "}\nmax_restarts: 0\n"
                      << extra;
  return path;
}

// The value of "key":"..." (unescaped) or "key":N in one line of protobuf JSON.
inline std::string JsonField(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = json.find(k);
  if (at == std::string::npos) return "";
  size_t i = at + k.size();
  if (i >= json.size() || json[i] != '"') return json.substr(i, json.find_first_of(",}", i) - i);
  std::string out;
  for (++i; i < json.size() && json[i] != '"'; ++i) {
    if (json[i] == '\\' && i + 1 < json.size()) ++i;  // \" and \\ as themselves (enough for these tests)
    out += json[i];
  }
  return out;
}

// A `loom coordinator --backend slurm` child process and the CLI pointed at it.
class Coordinator {
 public:
  // Starts it with its data in `data_dir`, run folders under Tmp("runs"),
  // Tmp("data") as a data root, one rank per node and a 300 ms poll; `extra`
  // flags are added. port() is 0 when it did not come up within 30 s.
  explicit Coordinator(std::string data_dir, std::vector<std::string> extra = {}) : data_(std::move(data_dir)) {
    std::vector<std::string> argv = {Loom(),
                                     "coordinator",
                                     "--backend",
                                     "slurm",
                                     "--data-dir",
                                     data_,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--metrics-listen",
                                     "127.0.0.1:0",
                                     "--port-file",
                                     data_ + ".port",
                                     "--run-root",
                                     Tmp("runs"),
                                     "--data-roots",
                                     Tmp("data"),
                                     "--slurm-ranks-per-node",
                                     "1",
                                     "--slurm-poll-ms",
                                     "300"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::filesystem::create_directories(Tmp("data"));
    std::filesystem::remove(data_ + ".port");
    pid_ = daemons::Spawn(argv, data_ + ".log");
    if (daemons::ReadPort(data_ + ".port", 30) > 0) std::ifstream(data_ + ".port") >> port_ >> metrics_port_;
  }
  ~Coordinator() { Stop(); }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  std::string log() const { return testing::ReadFileBytes(data_ + ".log"); }
  // SIGTERM, then the exit status (-1: killed after 20 s).
  int Stop() {
    if (pid_ <= 0) return 0;
    kill(pid_, SIGTERM);
    const int st = daemons::WaitExit(pid_, 20);
    pid_ = -1;
    return st;
  }
  testing::CliResult Cli(const std::string& args) const {
    return testing::Shell(
        absl::StrCat("timeout 30 ", Loom(), " ", args, " --coordinator 127.0.0.1:", port_, " --data-dir ", data_));
  }
  std::string Submit(const std::string& spec) const {
    testing::CliResult r = Cli("submit --json " + spec);
    EXPECT_EQ(r.code, 0) << r.output;
    return JsonField(r.output, "job_id");
  }
  std::string Status(const std::string& job) const { return Cli("status --json " + job).output; }
  // Polls `loom status` until `done` holds for its JSON or `seconds` pass.
  template <typename F>
  std::string AwaitStatus(const std::string& job, int seconds, F done) const {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    std::string s = Status(job);
    while (!done(s) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      s = Status(job);
    }
    return s;
  }

 private:
  std::string data_;
  pid_t pid_ = -1;
  int port_ = 0, metrics_port_ = 0;
};

}  // namespace loom::tests::slurm
