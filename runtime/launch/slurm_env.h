// Slurm's environment inside an allocation (`srun loom run ...`, or `loom
// run` in an sbatch script under srun): the job, its nodes and this task's
// place among them, checked and mapped onto a NodeGroup.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/launch/node_group.h"

namespace loom::runtime::launch {

// A Slurm hostlist ("n[1-3],gpu[01-02,07],login") expanded in order, as
// `scontrol show hostnames` does. Brackets hold comma-separated numbers and
// ranges; a range keeps the width of its zero-padded first number.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list);

struct SlurmAllocation {
  std::string job_id;               // SLURM_JOB_ID
  std::string step_id;              // SLURM_STEP_ID ("" in the batch script itself)
  std::vector<std::string> nodes;   // SLURM_STEP_NODELIST or SLURM_NODELIST, expanded
  int nnodes = 0;                   // SLURM_STEP_NUM_NODES or SLURM_NNODES
  int node_id = 0;                  // SLURM_NODEID
  int ntasks = 0;                   // SLURM_STEP_NUM_TASKS or SLURM_NTASKS
  int procid = 0;                   // SLURM_PROCID
  int localid = 0;                  // SLURM_LOCALID
  int cpus_on_node = 0;             // SLURM_CPUS_ON_NODE (0: unset)
  int gpus_on_node = -1;            // SLURM_GPUS_ON_NODE (-1: unset)
  int restart_count = 0;            // SLURM_RESTART_COUNT (a requeued job's run)
  std::string submit_dir;           // SLURM_SUBMIT_DIR
  std::string cluster;              // SLURM_CLUSTER_NAME
  std::string launcher;             // SLURM_SRUN_COMM_HOST-SLURM_SRUN_COMM_PORT: this srun
};

using GetEnv = std::function<const char*(const char*)>;

// The allocation this process runs in, or nullopt outside Slurm (no
// SLURM_JOB_ID). A malformed or inconsistent variable is INVALID_ARGUMENT
// naming it and its value.
absl::StatusOr<std::optional<SlurmAllocation>> SlurmFromEnv(const GetEnv& env);

// One `loom run` per node: node id -> node rank, the node's name from the
// node list, the rendezvous folder
// <submit dir>/.loom-slurm/<cluster>.<job>.<step>.<restart>.<launcher>: the
// srun's address keeps a later step (or a cluster that reuses job ids) from
// finding an earlier step's coordinator.
// INVALID_ARGUMENT when the step runs other than one task per node.
absl::StatusOr<NodeGroup> NodeGroupFromSlurm(const SlurmAllocation& a);

}  // namespace loom::runtime::launch
