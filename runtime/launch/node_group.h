// Which node of a multi-node `loom run` this process is, and how the nodes
// meet. One `loom run` per node: node 0 holds the coordinator and an agent,
// every other node an agent that joins it. The nodes meet through a
// rendezvous folder on the filesystem they share (the run folder and
// checkpoints need one anyway): node 0 leaves its coordinator's address and
// join token there (mode 600) for the others.
//
// A NodeGroup comes from a scheduler's environment (NodeGroupFromSlurm,
// slurm_env.h); `loom run` turns it into its multi-node flags (--nnodes,
// --node-rank, --rdzv-endpoint, the join token), the same mechanism a user
// drives by hand.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::runtime::launch {

struct NodeGroup {
  int nnodes = 1;
  int node_rank = 0;             // 0: this node holds the coordinator
  std::string node_name;         // the agent's name in the coordinator
  std::string rdzv_dir;          // shared folder where the nodes meet
  int rdzv_timeout_s = 120;      // for the other nodes to join, and to find node 0
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

}  // namespace loom::runtime::launch
