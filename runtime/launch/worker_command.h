// `loom worker`: one rank of a job, as a node agent starts it.
//
// The agent passes everything through the environment:
//   LOOM_JOB_SPEC       the job spec (YAML)            (required)
//   LOOM_RANK, LOOM_WORLD_SIZE                         (required)
//   LOOM_STORE_ADDR, LOOM_STORE_SECRET   the job's rendezvous store (world > 1)
//   LOOM_ERROR_FILE     where the failure reason goes (the job's root cause)
//   LOOM_PROGRESS_FILE  rank 0 writes "<step> <checkpoint_step>" there
//   LOOM_RENDEZVOUS_TIMEOUT_S  how long to wait for the peers (default 120)
//   LOOM_ALLOWED_ROOTS  ':'-separated folders the spec's paths must resolve
//                       into (the coordinator's confinement, checked again)
// SIGTERM or SIGINT ends the worker at once (stop_signal.h): exit 128 + signal,
// and no checkpoint is committed after it.
// A one-rank CPU job trains in this process exactly as `loom train` does
// (checkpoints included); a one-rank GPU job too, after meeting at the store
// for a process group whose CUDA backend averages its loss. A multi-rank job
// meets its peers at the store (a ProcessGroup with the spec's backend,
// default cpu:gloo) and runs the same training loop on its rank of the layout
// (parallel_train.h).
//
// Exit codes: 0 done, 1 runtime failure (retried by the coordinator), 2 bad
// configuration (never retried), 143 / 130 stopped by SIGTERM / SIGINT.
#pragma once

#include <string>
#include <vector>

namespace loom::runtime::launch {

int RunWorkerCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::launch
