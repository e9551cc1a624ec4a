// Which node of a multi-node `loom run` this process is, and how the nodes
// meet. One `loom run` per node: node 0 holds the coordinator and an agent,
// every other node an agent that joins it. The nodes meet through a
// rendezvous folder on the filesystem they share (the run folder and
// checkpoints need one anyway): node 0 leaves its coordinator's address and
// join token there (mode 600), and the job's result once it ends.
//
// A NodeGroup comes from a scheduler's environment (FromSlurm, slurm_env.h)
// or from explicit flags; either way `loom run` uses the same mechanism.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::launch {

struct NodeGroup {
  int nnodes = 1;
  int node_rank = 0;             // 0: this node holds the coordinator
  std::string node_name;         // the agent's name in the coordinator
  std::string advertise_host;    // this node's address, as the other nodes reach it
  std::string rdzv_dir;          // shared folder where the nodes meet
  int rdzv_timeout_s = 120;      // for the other nodes to join, and to find node 0
  int lost_after_s = 10;         // a joined node gives up once node 0 is unreachable this long
  int local_cpus = 0;            // 0: unknown (the allocation did not say)
  int local_gpus = -1;           // -1: unknown
};

struct Rendezvous {
  std::string coordinator;  // host:port
  std::string join_token;
};

// Node 0: writes <rdzv_dir>/coordinator (atomically, mode 600).
absl::Status PublishRendezvous(const NodeGroup& g, const Rendezvous& r);
// Other nodes: waits up to g.rdzv_timeout_s for node 0's file.
absl::StatusOr<Rendezvous> AwaitRendezvous(const NodeGroup& g);

// Node 0: the job's exit code in <rdzv_dir>/result, for the other nodes.
absl::Status PublishResult(const NodeGroup& g, int exit_code);
// The published exit code, or -1 while there is none.
int ReadResult(const NodeGroup& g);

// Whether a TCP connection to `host_port` (node 0's coordinator) opens
// within `timeout_ms`.
bool Reachable(const std::string& host_port, int timeout_ms);

}  // namespace loom::launch
