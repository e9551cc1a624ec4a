// `loom coordinator`: runs the coordinator daemon until SIGINT or SIGTERM.
//
// Every setting is a flag or an environment variable (flags win):
//   --data-dir DIR            LOOM_DATA_DIR       (default $HOME/.loom)
//   --listen HOST:PORT        LOOM_LISTEN         (default 127.0.0.1:7070)
//   --metrics-listen HOST:PORT|off  LOOM_METRICS_LISTEN (default 127.0.0.1:7071)
//   --max-request-bytes N     LOOM_MAX_REQUEST_BYTES (default 4194304)
//   --allowed-roots A,B       LOOM_ALLOWED_ROOTS  (default: any path, no `..`)
//   --heartbeat-ms N          LOOM_HEARTBEAT_MS   (default 1000)
//   --max-queued-jobs N       LOOM_MAX_QUEUED_JOBS (default 10000)
//   --reclaim-grace-ms N      LOOM_RECLAIM_GRACE_MS (default 5000): after a restart, how
//                             long running ranks have to be reclaimed by their agents
//   --tls-cert PEM --tls-key PEM     LOOM_TLS_CERT, LOOM_TLS_KEY (TLS on)
//   --tls-client-ca PEM       LOOM_TLS_CLIENT_CA  (mutual TLS: verify clients)
//   --port-file PATH          write "<grpc port> <metrics port>\n" once listening
//   --init                    start an empty job store although <data-dir>/store.marker
//                             says loom.db existed (it is missing or empty); job and agent
//                             ids continue after the old ones. No environment variable.
// One coordinator per data folder (<data-dir>/lock) and per port.
// Flags take `--name=value` or `--name value`. Exit codes: 0 after a clean
// shutdown, 1 when the server cannot start, 2 for bad flags.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/service/server.h"

namespace loom::service {

struct CoordinatorFlags {
  ServerOptions server;
  std::string port_file;
};

using EnvLookup = std::function<const char*(const char*)>;

// Parses flags over environment defaults; InvalidArgument names the flag.
absl::StatusOr<CoordinatorFlags> ParseCoordinatorFlags(const std::vector<std::string>& args,
                                                       const EnvLookup& env);

int RunCoordinatorCommand(const std::vector<std::string>& args);

}  // namespace loom::service
