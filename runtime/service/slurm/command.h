// Runs a Slurm client command (sbatch, squeue, scontrol, scancel) as a
// subprocess with a time limit, capturing its stdout and stderr.
//
// The program is looked up on PATH first, so a missing one is NotFound naming
// it rather than an exit code 127. A command still running at the deadline is
// killed with its process group (SIGKILL) and reported as DeadlineExceeded
// naming it and the limit. The child starts with every signal unblocked and
// stdin from /dev/null.
//
//   LOOM_ASSIGN_OR_RETURN(CommandResult r, RunCommand({"squeue", "-h"}, std::chrono::seconds(10)));
//   if (r.exit_code != 0) ... r.err ...
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::runtime::service::slurm {

struct CommandResult {
  int exit_code = 0;  // the exit status; 128 + N when killed by signal N
  std::string out, err;
};

// `cwd`: the child's working folder ("" keeps this process's).
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                         const std::string& cwd = "");

// argv[0] found on PATH (or as given when it holds a '/'); NotFound otherwise.
absl::StatusOr<std::string> FindProgram(const std::string& name);

}  // namespace loom::runtime::service::slurm
