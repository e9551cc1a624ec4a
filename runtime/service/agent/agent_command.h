// `loom agent`: runs a node agent until SIGINT or SIGTERM (then kills its
// ranks' process groups and exits 0).
//
// Flags (env in parentheses; flags win):
//   --coordinator HOST:PORT  (LOOM_COORDINATOR, default 127.0.0.1:7070); torchrun's
//                            name, --rdzv-endpoint, means the same
//   --data-dir DIR           (LOOM_AGENT_DATA_DIR, default $HOME/.loom/agent): rank logs
//   --join-token-file FILE   (LOOM_JOIN_TOKEN_FILE, default <token-dir>/join-token) the
//                            coordinator's join token (a copy of its <data-dir>/join-token,
//                            mode 0600); env LOOM_JOIN_TOKEN holding the token wins
//   --token-dir DIR          (LOOM_DATA_DIR, default $HOME/.loom) where join-token is when
//                            --join-token-file is not given
//   --cpu-slots N            (LOOM_CPU_SLOTS, default: the number of CPUs)
//   --gpus N                 (LOOM_GPUS, default 0)
//   --nproc-per-node N       torchrun's name: N of the --gpus GPUs, else N CPU slots
//   --hostname NAME          (LOOM_HOSTNAME, default: gethostname)
//   --rendezvous-host ADDR   (LOOM_RENDEZVOUS_HOST, default 127.0.0.1) where the
//                            store for jobs whose rank 0 runs here listens
//   --worker "CMD ARGS"      (LOOM_WORKER, default "<this binary> worker"), split on spaces
//   --tls-ca PEM [--tls-cert PEM --tls-key PEM]  (LOOM_TLS_CA, LOOM_TLS_CERT, LOOM_TLS_KEY)
//   --register-timeout-s N   (LOOM_REGISTER_TIMEOUT_S, default 0) give up registering after
//                            N s of unreachable coordinator; 0 keeps trying (backoff to 5 s)
//                            until SIGINT/SIGTERM
// Exit codes: 0 after a clean shutdown (also when signalled while still registering),
// 1 when the coordinator refuses it or --register-timeout-s ran out, 2 for bad flags.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/service/agent/agent.h"

namespace loom::runtime::service::agent {

struct AgentFlags {
  AgentOptions agent;
  std::string token_dir;
  std::string join_token_file;
  bool help = false;
  std::string usage;  // with help: the text `loom agent --help` prints
  std::string tls_ca, tls_cert, tls_key;
  int register_timeout_s = 0;  // 0: retry a transient failure until signalled
};

absl::StatusOr<AgentFlags> ParseAgentFlags(const std::vector<std::string>& args,
                                           const std::function<const char*(const char*)>& env);

int RunAgentCommand(const std::vector<std::string>& args);

}  // namespace loom::runtime::service::agent
