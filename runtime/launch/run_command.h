// `loom run JOB.yaml`: the single-machine embedded default, like torchrun.
//
// One process holds a coordinator (gRPC on loopback, data in a private
// folder) and an agent with --nproc-per-node CPU slots. It submits the job,
// launches the workers (`loom worker`, one per rank), prints rank 0's output
// as it comes, and exits with the job's result: 0 SUCCEEDED, 1 FAILED (with
// the root-cause rank and message), 2 bad input. Ctrl-C cancels the job and
// leaves no worker behind.
//
// Flags override the job spec:
//   --nproc-per-node N   ranks on this machine (default: dp x tp of the spec);
//                        with a spec of dp=1, it sets dp = N / tp
//   --dp N, --tp N, --steps N, --max-restarts N, --run-dir DIR
//   --ranks-per-gpu N    device: cuda ranks sharing one GPU (resources.ranks_per_gpu)
//   --threads-per-rank N host threads of each rank (resources.threads_per_rank;
//                        default: the machine's usable CPUs shared among them)
//   --keep-state DIR     keep the coordinator's folder (default: a temporary
//                        folder removed at exit)
//   --json               one JSON object per state change instead of text
#pragma once

#include <string>
#include <vector>

namespace loom::runtime::launch {

int RunRunCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::launch
