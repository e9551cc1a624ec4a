#include "collectives/bench/torch_peer.h"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectives/bench/bench_worker.h"

namespace loom::collectives::bench {

extern const char kTorchGlooBenchPy[];  // torch_gloo_bench.py, embedded by a genrule

namespace {

std::string ShellQuote(const std::string& s) {
  std::string o = "'";
  for (char c : s) {
    if (c == '\'') o += "'\\''";
    else o += c;
  }
  return o + "'";
}

}  // namespace

TorchRun RunTorchPeer(const BenchConfig& c, int ranks) {
  TorchRun run;
  const char* py_env = std::getenv("LOOM_BENCH_PYTHON");
  std::string python = py_env && *py_env ? py_env : "/usr/bin/python3";
  if (access(python.c_str(), X_OK) != 0) {
    run.status = absl::StrCat("no torch column: ", python, " not found");
    return run;
  }
  char path[] = "/tmp/loom_torch_gloo_bench_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    run.status = "no torch column: cannot write the script to /tmp";
    return run;
  }
  std::string script = kTorchGlooBenchPy;
  bool wrote = write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
  close(fd);
  std::vector<int64_t> sizes = Sizes(c);
  std::vector<int> iters;
  for (int64_t s : sizes) iters.push_back(ItersFor(c, s));
  std::string cmd = absl::StrCat("timeout -k 5 ", c.timeout_s, " ", ShellQuote(python), " ", path,
                                 " --ranks=", ranks, " --ops=", absl::StrJoin(c.ops, ","),
                                 " --sizes=", absl::StrJoin(sizes, ","), " --iters=", absl::StrJoin(iters, ","),
                                 " --warmup=", c.warmup, " 2>&1");
  FILE* p = wrote ? popen(cmd.c_str(), "r") : nullptr;
  if (p == nullptr) {
    unlink(path);
    run.status = "no torch column: could not start python";
    return run;
  }
  std::string other, version;
  char line[4096];
  while (fgets(line, sizeof(line), p)) {
    std::string l = std::string(absl::StripTrailingAsciiWhitespace(line));
    std::vector<std::string> w = absl::StrSplit(l, ' ');
    if (w[0] == "TORCH" && w.size() >= 2) {
      run.available = true;
      run.status = absl::StrCat("torch ", w[1], " (", python, ")");
      std::vector<std::string> v = absl::StrSplit(w[1], '.');
      version = v.size() >= 2 ? absl::StrCat(v[0], ".", v[1]) : w[1];
    } else if (w[0] == "NOTORCH") {
      run.status = absl::StrCat("no torch column: ", python, ": ", l.substr(8));
    } else if (w[0] == "RESULT" && w.size() == 5) {
      BenchRow r;
      r.impl = "torch:gloo";
      r.ranks = ranks;
      r.op = w[1];
      if (!absl::SimpleAtoi(w[2], &r.bytes) || !absl::SimpleAtod(w[3], &r.time_us)) continue;
      r.ok = w[4] == "ok";
      run.rows.push_back(r);
    } else if (w[0] == "UNSUPPORTED" && w.size() >= 3) {
      BenchRow r;
      r.impl = "torch:gloo";
      r.ranks = ranks;
      r.op = w[1];
      (void)absl::SimpleAtoi(w[2], &r.bytes);
      r.na = r.op == "reduce_scatter"
                 ? absl::StrCat("n/a (torch ", version, " Gloo has no reduce_scatter)")
                 : absl::StrCat("n/a (", l.substr(std::min(l.size(), 13 + w[1].size() + w[2].size())), ")");
      run.rows.push_back(r);
    } else if (other.size() < 4000) {
      absl::StrAppend(&other, l, "\n");
    }
  }
  int st = pclose(p);
  unlink(path);
  if (run.status.empty()) run.status = absl::StrCat("no torch column: ", python, " printed no version");
  if (run.available && (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
    run.error = absl::StrCat("torch peer at ", ranks, " ranks failed (status ", st, "): ", other);
  }
  return run;
}

}  // namespace loom::collectives::bench
