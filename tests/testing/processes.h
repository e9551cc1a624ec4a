// Finding the processes a test started through `loom run`, for fault
// injection (kill -9 of one rank's worker).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace loom::tests::testing {

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An environment entry that names one test's `loom run`: prefixed to its
// command (RunLoom's `env`), every worker of that job inherits it, and
// FindLoomWorker looks for it. TEST_TMPDIR alone does not do: outside bazel
// it is /tmp for every test binary, so a kill meant for one job could land
// on another's worker.
inline std::string WorkerMarker(const std::string& tag) {
  return "LOOM_TEST_MARKER=" + tag + "." + std::to_string(getpid());
}

// The pid of a `loom worker` whose environment holds the entry `marker`
// (WorkerMarker's) and LOOM_RANK=rank; -1 if none.
inline pid_t FindLoomWorker(const std::string& marker, int rank) {
  namespace fs = std::filesystem;
  const std::string nul(1, '\0');
  const std::string want = nul + marker + nul, rank_var = nul + "LOOM_RANK=" + std::to_string(rank) + nul;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadFileBytes(e.path() / "cmdline").find("worker") == std::string::npos) continue;
    // Each entry of environ ends in a NUL; one in front makes the first
    // entry match like the others.
    const std::string env = nul + ReadFileBytes(e.path() / "environ");
    if (env.find(want) == std::string::npos || env.find(rank_var) == std::string::npos) continue;
    return static_cast<pid_t>(std::atoi(pid.c_str()));
  }
  return -1;
}

}  // namespace loom::tests::testing
