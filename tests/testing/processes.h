// Finding the processes a test started through `loom run`, for fault
// injection (kill -9 of one rank's worker).
#pragma once

#include <sys/types.h>

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

// The pid of a `loom worker` whose environment holds `marker` (a test's
// TEST_TMPDIR, inherited through loom run) and LOOM_RANK=rank; -1 if none.
inline pid_t FindLoomWorker(std::string marker, int rank) {
  namespace fs = std::filesystem;
  while (marker.size() > 1 && marker.back() == '/') marker.pop_back();
  const std::string rank_var = std::string(1, '\0') + "LOOM_RANK=" + std::to_string(rank) + std::string(1, '\0');
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadFileBytes(e.path() / "cmdline").find("worker") == std::string::npos) continue;
    const std::string env = ReadFileBytes(e.path() / "environ");
    if (env.find(marker) == std::string::npos || env.find(rank_var) == std::string::npos) continue;
    return static_cast<pid_t>(std::atoi(pid.c_str()));
  }
  return -1;
}

}  // namespace loom::tests::testing
