#include "runtime/launch/rank_gpu.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::runtime::launch {

absl::StatusOr<RankGpu> PickRankGpu(const char* loom_gpu, const char* visible, int rank, int ranks_per_gpu) {
  RankGpu g;
  const bool placed = loom_gpu != nullptr && *loom_gpu != '\0';
  if (placed) {
    if (!absl::SimpleAtoi(loom_gpu, &g.gpu) || g.gpu < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("LOOM_GPU: expected the rank's GPU index (an integer >= 0) for a device: cuda job, got '",
                       loom_gpu, "'"));
  } else {
    g.gpu = rank / (ranks_per_gpu > 0 ? ranks_per_gpu : 1);
  }
  std::vector<std::string> listed;
  if (visible != nullptr && *visible != '\0') listed = absl::StrSplit(visible, ',');
  if (listed.size() == 1) {  // narrowed already
    g.visible = listed[0];
  } else if (listed.empty()) {
    g.visible = std::to_string(g.gpu);
  } else if (g.gpu < static_cast<int>(listed.size())) {
    g.visible = listed[g.gpu];
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        placed ? absl::StrCat("LOOM_GPU ", g.gpu)
               : absl::StrCat("rank ", rank, " / resources.ranks_per_gpu ", ranks_per_gpu, " = GPU ", g.gpu),
        " is outside CUDA_VISIBLE_DEVICES '", visible, "' (", listed.size(), " GPUs)"));
  }
  g.device = 0;
  return g;
}

absl::Status ApplyRankGpu(const RankGpu& g) {
  if (::setenv("CUDA_VISIBLE_DEVICES", g.visible.c_str(), 1) != 0)
    return absl::InternalError("setenv CUDA_VISIBLE_DEVICES failed");
  return absl::OkStatus();
}

}  // namespace loom::runtime::launch
