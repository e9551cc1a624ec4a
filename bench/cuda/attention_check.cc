// attention_check: runs the flash-attention checks (kernels/cuda/attention/
// attention_checks.h) on the GPU and prints the table of relative errors
// against the fp64 CPU reference, with the hash of the attention sources.
// Exit status 0 only when every check passed.
//
//   attention_check [--full] [--seed=N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/attention/attention_checks.h"
#include "kernels/cuda/cuda_device.h"

int main(int argc, char** argv) {
  loom::cuda::CheckOptions opts;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) opts.full = true;
    else if (std::strncmp(argv[i], "--seed=", 7) == 0) opts.seed = std::strtoull(argv[i] + 7, nullptr, 10);
    else {
      std::fprintf(stderr, "usage: attention_check [--full] [--seed=N]\n");
      return 2;
    }
  }
  auto name = loom::cuda::DeviceName(0);
  if (!name.ok()) {
    std::printf("attention_check: no GPU: %s\n", std::string(name.status().message()).c_str());
    return 3;
  }
  std::printf("device 0: %s; seed %llu; attention source hash %s\n", name->c_str(),
              static_cast<unsigned long long>(opts.seed), loom::cuda::AttentionSourceHash());
  auto rows = loom::cuda::RunAttentionChecks(opts);
  if (!rows.ok()) {
    std::printf("attention_check: %s\n", std::string(rows.status().message()).c_str());
    return 1;
  }
  std::printf("%s", loom::cuda::FormatCheckTable(*rows).c_str());
  for (const auto& r : *rows)
    if (!r.pass) return 1;
  return 0;
}
