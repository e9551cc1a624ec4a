// Which GPU a `loom worker` rank of a device: cuda job trains on.
//
// An agent places a CUDA job's ranks on its GPUs, resources.ranks_per_gpu
// ranks to a GPU, and tells each rank its GPU in the agent's numbering
// (LOOM_GPU) with CUDA_VISIBLE_DEVICES already narrowed to that GPU alone
// (runtime/service/agent/agent.h). A worker started without an agent
// (LOOM_GPU unset, every rank on this machine) takes GPU rank /
// ranks_per_gpu, the placement the scheduler gives on one node.
//
// Either way the rank runs with exactly one visible device, so its CUDA
// ordinal is 0 for everything in the process: the executor
// (CudaOptions::device), the NCCL backend of every (sub)group (which picks
// its device among the visible ones by group rank) and cuda:gloo's copier
// (the current device). PickRankGpu is pure; ApplyRankGpu sets the variable
// and must run before anything in the process touches CUDA.
//
//   auto g = PickRankGpu(getenv("LOOM_GPU"), getenv("CUDA_VISIBLE_DEVICES"), rank, per_gpu);
//   LOOM_RETURN_IF_ERROR(ApplyRankGpu(*g));   // then create the process group
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace loom::runtime::launch {

struct RankGpu {
  int gpu = 0;          // in the node's (or the inherited list's) numbering
  std::string visible;  // CUDA_VISIBLE_DEVICES for the rank: one entry
  int device = 0;       // the CUDA ordinal inside the process (always 0)
};

// loom_gpu, visible: the environment's LOOM_GPU and CUDA_VISIBLE_DEVICES
// (null or empty: unset). InvalidArgument names LOOM_GPU when it is not an
// integer >= 0, or when it (or rank / ranks_per_gpu) is outside a visible
// list of several entries. A visible list of one entry is the agent's
// narrowing (or a machine with one GPU) and is kept.
absl::StatusOr<RankGpu> PickRankGpu(const char* loom_gpu, const char* visible, int rank, int ranks_per_gpu);

// Sets CUDA_VISIBLE_DEVICES to g.visible in this process.
absl::Status ApplyRankGpu(const RankGpu& g);

}  // namespace loom::runtime::launch
