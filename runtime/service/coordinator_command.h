// `loom coordinator`: runs the coordinator daemon until SIGINT or SIGTERM.
//
// Every setting is a flag or an environment variable (flags win); the list,
// with defaults, is `loom coordinator --help` (base/flags.h). Flags take
// `--name=value` or `--name value`; `--init` takes no value. Exit codes: 0
// after a clean shutdown, 1 when the server cannot start (the data folder or
// port is in use, loom.db is lost), 2 for bad flags or settings.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/service/server.h"
#include "runtime/service/slurm/slurm_placement.h"

namespace loom::runtime::service {

struct CoordinatorFlags {
  ServerOptions server;
  std::string backend = "agents";  // --backend: agents | slurm
  slurm::SlurmOptions slurm;       // with --backend slurm
  std::string port_file;
  bool help = false;
  std::string usage;  // with help: the text `loom coordinator --help` prints
};

using EnvLookup = std::function<const char*(const char*)>;

// Parses flags over environment defaults; InvalidArgument names the flag.
absl::StatusOr<CoordinatorFlags> ParseCoordinatorFlags(const std::vector<std::string>& args,
                                                       const EnvLookup& env);

int RunCoordinatorCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::service
