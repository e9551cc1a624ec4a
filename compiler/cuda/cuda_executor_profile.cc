// CudaExecutor (cuda_executor_impl.h): the CudaOptions::profile table, printed at
// destruction from the per-launch times RunCalls summed over the eager steps.
#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "compiler/cuda/cuda_executor_impl.h"

namespace loom::compiler::cuda::cuda_executor_internal {

// The profile table on stderr: per launch kind, then the costliest launches
// (identical descriptions, e.g. the same GEMM in every layer, summed).
void Impl::PrintProfile() const {
  std::map<std::string, std::pair<double, int>> by_kind, by_desc;
  double total = 0;
  for (size_t i = 0; i < prof_ms_.size(); ++i) {
    const double ms = prof_ms_[i] / profiled_steps_;
    total += ms;
    const std::string kind = desc_[i].substr(0, desc_[i].find(' '));
    by_kind[kind].first += ms;
    ++by_kind[kind].second;
    by_desc[desc_[i]].first += ms;
    ++by_desc[desc_[i]].second;
  }
  auto print = [&](const char* title, const std::map<std::string, std::pair<double, int>>& m, size_t top) {
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [k, v] : m) rows.push_back({v.first, absl::StrCat(k, "  x", v.second)});
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "%s\n", title);
    for (size_t r = 0; r < rows.size() && r < top; ++r)
      std::fprintf(stderr, "  %8.3f ms  %5.1f%%  %s\n", rows[r].first, 100 * rows[r].first / total, rows[r].second.c_str());
  };
  std::fprintf(stderr, "cuda profile: %d eager step(s), %.3f ms of launches per step, %zu launches\n",
               profiled_steps_, total, prof_ms_.size());
  print("by launch kind:", by_kind, 40);
  print("costliest launches:", by_desc, 30);
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
