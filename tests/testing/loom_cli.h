// Helpers for tests that run the real `loom` binary (or any shell command)
// and look at its exit code and output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace loom::tests::testing {

struct CliResult {
  int code = -1;       // exit status, or 128 + signal
  std::string output;  // stdout and stderr together
};

// Runs `cmd` with /bin/sh, stderr merged into stdout.
inline CliResult Shell(const std::string& cmd) {
  CliResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && fgets(buf, sizeof(buf), p)) r.output += buf;
  int st = p ? pclose(p) : -1;
  r.code = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// `runtime/loom ARGS` (a data dependency of the test), bounded by `timeout_s`,
// with `env` (NAME=VALUE entries, space-separated) added to its environment.
inline CliResult RunLoom(const std::string& args, int timeout_s = 600, const std::string& env = "") {
  return Shell((env.empty() ? "" : env + " ") + "timeout " + std::to_string(timeout_s) + " runtime/loom " + args);
}

}  // namespace loom::tests::testing
