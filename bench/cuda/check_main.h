// The shared driver of the GPU check binaries (gpu_check, attention_check):
// parses [--full] [--progress] [--seed=N], prints the device, seed and source hash, runs
// the checks and their table. Exit status: 0 every check passed, 1 a failure,
// 2 bad usage, 3 no GPU.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/checks.h"
#include "kernels/cuda/cuda_device.h"

namespace loom::bench::cuda {

using CheckRunner =
    std::function<absl::StatusOr<std::vector<kernels::cuda::CheckResult>>(const kernels::cuda::CheckOptions&)>;

// tool: the binary's name; hash_label/hash: which sources the hash covers.
inline int CheckMain(int argc, char** argv, const char* tool, const char* hash_label, const char* hash,
                     const CheckRunner& run) {
  kernels::cuda::CheckOptions opts;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) opts.full = true;
    else if (std::strcmp(argv[i], "--progress") == 0) opts.progress = true;
    else if (std::strncmp(argv[i], "--seed=", 7) == 0) opts.seed = std::strtoull(argv[i] + 7, nullptr, 10);
    else {
      std::fprintf(stderr, "usage: %s [--full] [--progress] [--seed=N]\n", tool);
      return 2;
    }
  }
  auto name = kernels::cuda::DeviceName(0);
  if (!name.ok()) {
    std::printf("%s: no GPU: %s\n", tool, std::string(name.status().message()).c_str());
    return 3;
  }
  std::printf("device 0: %s; seed %llu; %s source hash %s\n", name->c_str(),
              static_cast<unsigned long long>(opts.seed), hash_label, hash);
  auto rows = run(opts);
  if (!rows.ok()) {
    std::printf("%s: %s\n", tool, std::string(rows.status().message()).c_str());
    return 1;
  }
  std::printf("%s", kernels::cuda::FormatCheckTable(*rows).c_str());
  for (const auto& r : *rows)
    if (!r.pass) return 1;
  return 0;
}

}  // namespace loom::bench::cuda
