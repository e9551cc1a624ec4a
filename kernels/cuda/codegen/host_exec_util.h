// Helpers of the host-execution tests (pointwise_host_exec_test,
// rowwise_host_exec_test), which compile generated CUDA sources with the host
// C++ compiler and run them through a shim.
#pragma once

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace loom::kernels::cuda::codegen {

// The first host C++ compiler found, or "" (the tests then fail).
inline std::string FindHostCompiler() {
  for (const char* c : {"/usr/bin/g++", "/usr/bin/c++", "/usr/bin/clang++"})
    if (::access(c, X_OK) == 0) return c;
  return "";
}

// The whole file (empty when it cannot be read): compiler logs for failures.
inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace loom::kernels::cuda::codegen
