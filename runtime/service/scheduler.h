// Gang scheduling of jobs onto registered agents.
//
// Agents offer CPU slots and GPUs. A CPU job needs one slot per rank; a CUDA
// job needs one GPU per `ranks_per_gpu` ranks (its Demand): its ranks fill
// each GPU it takes up to that many before the next GPU (ranks 0..k-1 on the
// first), and a GPU holds one job's ranks only. Placement is all ranks or none: agents are
// filled in order of most free capacity first (ties by id), so a job spans as
// few agents as possible, and ranks are numbered contiguously per agent (rank
// 0 on the first agent).
//
// The queue is ordered by priority (higher first), then arrival (lower seq
// first). Schedule() walks it in that order and places what fits. A job that
// fits the cluster but not the free capacity blocks everything behind it (no
// backfill, so a large high-priority job cannot starve); a job larger than the
// whole cluster (queued only when it asked to wait for capacity) is skipped
// over, and never blocks the jobs behind it. Every job left waiting gets a
// human-readable reason.
//
// Memory: a CPU job states its per-rank memory (the planner's estimate;
// 0 = unknown) and agents their host memory (0 = not reported). A rank goes
// only to an agent whose memory holds it, so the cluster's capacity for a job
// counts only those agents' slots.
//
// Not thread-safe: the coordinator calls it under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace loom::runtime::service {

struct Demand {
  int32_t ranks = 0;
  bool gpu = false;
  int64_t bytes_per_rank = 0;  // CPU jobs; 0: unknown (fits any agent)
  int32_t ranks_per_gpu = 1;   // CUDA jobs: ranks sharing one GPU (resources.ranks_per_gpu)
};

struct Slot {
  int32_t rank = 0;
  std::string agent_id;
  int32_t gpu = -1;
};

struct Decision {
  int64_t job_id = 0;
  bool placed = false;
  std::vector<Slot> placement;  // when placed, in rank order
  std::string wait_reason;      // when not
};

class Scheduler {
 public:
  // Adds or replaces an agent's offer (its running placements are kept).
  void UpsertAgent(const std::string& id, int32_t cpu_slots, int32_t gpus, int64_t memory_bytes = 0);
  // Removes the agent; returns the jobs that had ranks on it (their
  // placements are released everywhere).
  std::vector<int64_t> RemoveAgent(const std::string& id);
  int num_agents() const { return static_cast<int>(agents_.size()); }

  // Capacity of all agents together for this kind of demand.
  int64_t TotalCapacity(bool gpu) const;
  int64_t FreeCapacity(bool gpu) const;
  // Ranks of d the agents can hold: their slots, or their GPUs times
  // d.ranks_per_gpu (CPU jobs: only agents whose memory holds one rank).
  int64_t TotalCapacity(const Demand& d) const;
  bool FitsCluster(const Demand& d) const { return d.ranks <= TotalCapacity(d); }
  // The most memory one agent reports (0 when none reports any).
  int64_t LargestAgentMemory() const;

  void Enqueue(int64_t job_id, int32_t priority, int64_t seq, const Demand& d);
  bool Dequeue(int64_t job_id);  // false when not queued
  int queue_length() const { return static_cast<int>(queue_.size()); }
  bool queued(int64_t job_id) const;

  // Places what fits, in queue order; placed jobs leave the queue and hold
  // their resources until Release. Returns one decision per queued job.
  std::vector<Decision> Schedule();
  // Places one job now, outside the queue (restart in place); nullopt when it
  // does not fit.
  std::optional<std::vector<Slot>> PlaceNow(int64_t job_id, const Demand& d);
  // Claims resources for ranks that already run on `agent_id` (adopted after
  // a coordinator restart) and adds them to the job's placement. Slots may
  // share a GPU; a GPU the job already holds may be named again. False, and
  // nothing claimed, when the agent is unknown or lacks the free resources.
  bool Adopt(int64_t job_id, const std::string& agent_id, const std::vector<Slot>& slots, bool gpu);
  void Release(int64_t job_id);
  const std::vector<Slot>* Placement(int64_t job_id) const;

 private:
  struct Agent {
    int32_t cpu_slots = 0;
    int64_t memory_bytes = 0;
    std::vector<int64_t> gpu_owner;  // job id per GPU, 0 = free
    std::map<int64_t, int32_t> cpu_used;  // job -> slots
    int32_t FreeCpu() const;
    int32_t FreeGpu() const;
    // Ranks of d this agent can take now (free) or at most (total).
    int64_t Capacity(const Demand& d, bool free) const;
    bool Holds(const Demand& d) const {
      return d.gpu || d.bytes_per_rank <= 0 || memory_bytes <= 0 || d.bytes_per_rank <= memory_bytes;
    }
  };
  struct Entry {
    int64_t job_id;
    int32_t priority;
    int64_t seq;
    Demand demand;
  };
  std::optional<std::vector<Slot>> TryPlace(int64_t job_id, const Demand& d);
  std::string DescribeShortage(const Demand& d) const;
  int64_t FreeCapacity(const Demand& d) const;

  std::map<std::string, Agent> agents_;
  std::vector<Entry> queue_;  // kept sorted
  std::map<int64_t, std::vector<Slot>> placements_;
};

}  // namespace loom::runtime::service
