// Slurm as the coordinator's placement backend (`loom coordinator --backend
// slurm`): each Loom job becomes one Slurm batch job, and Slurm's view of it
// drives the job's Loom state.
//
// Placing: a thread of the backend writes <run_dir>/job.yaml (the validated
// spec) and <run_dir>/loom.sbatch (`loom run job.yaml --run-dir <run_dir>`,
// which inside the allocation starts one `loom run` per node through srun:
// docs/slurm.md) and submits it with
//   sbatch --parsable --job-name=loom.<name>.job-<n> --nodes=N
//          --ntasks-per-node=R [--gpus-per-node=R] --output=<run_dir>/slurm-%j.out
//          --chdir=<run_dir> --comment=<comment> --requeue|--no-requeue [--partition=P]
// from the run folder (so the nodes meet in <run_dir>/.loom-slurm/). The
// job's dp x tp ranks go on N = ceil(ranks / ranks_per_node) nodes (more when
// that does not divide the ranks evenly), R per node: the gang is Slurm's.
// `--requeue` when the spec allows restarts (max_restarts > 0).
//
// Watching: every poll_ms one `squeue -h -t all -j <ids> -o "%i %T %r"`;
// `scontrol show job -o <id>` when a job's state changes (exit code,
// restarts). Slurm's states map onto Loom's:
//   PENDING                          PENDING (wait reason: Slurm's reason)
//   CONFIGURING RUNNING COMPLETING SUSPENDED REQUEUED ... RUNNING
//   PENDING again after a requeue    RUNNING, restarts = Slurm's Restarts
//   COMPLETED                        SUCCEEDED
//   CANCELLED                        CANCELLED
//   FAILED NODE_FAIL OUT_OF_MEMORY TIMEOUT BOOT_FAIL DEADLINE PREEMPTED
//                                    FAILED, root cause naming the Slurm state,
//                                    exit code and reason, and the last line of
//                                    the job's output
// A job that Slurm has forgotten (MinJobAge) before it was seen to end is
// asked of `sacct` where that exists, else FAILED saying its end is unknown.
// Progress (the current step) is read from <run_dir>/metrics.jsonl.
//
// Cancel: `scancel <id>` (retried each poll until Slurm takes it); the job
// ends CANCELLED in Slurm's view too. A job cancelled before its sbatch ran is
// never submitted.
//
// Errors: every Slurm command runs with a time limit (command_timeout_ms).
// Create() refuses to start, naming what is wrong, when sbatch, squeue,
// scontrol or scancel is missing, or `squeue` cannot reach the controller
// (munge not running, slurmctld down). An sbatch that fails or times out
// fails the job with a root cause quoting Slurm and saying which of munge or
// the controller it points at.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/service/placement/placement.h"

namespace loom::runtime::service::slurm {

struct SlurmOptions {
  std::string loom;        // the `loom` the batch scripts run (every node must have it at this path)
  int ranks_per_node = 8;  // most ranks of one job on a node
  std::string partition;   // sbatch --partition ("": the cluster's default)
  std::string comment;     // sbatch --comment, e.g. which coordinator placed the job
  int poll_ms = 1000;
  int command_timeout_ms = 20000;
};

// Nodes and ranks per node for a job of `ranks` ranks (see the header).
struct Gang {
  int nodes = 1;
  int ranks_per_node = 1;
};
Gang GangFor(int ranks, int ranks_per_node);
// GPUs a node of the gang asks Slurm for: none for device: cpu, else its
// ranks packed resources.ranks_per_gpu to a GPU (rounded up).
int GpusPerNode(const v1::JobSpec& spec, const Gang& g);

// Slurm's state name (a trailing '+' or " by <uid>" ignored) -> Loom's state:
// PENDING, RUNNING or a terminal state; JOB_STATE_UNSPECIFIED when unknown.
v1::JobState MapSlurmState(const std::string& slurm_state);

// `Key=Value` fields of one `scontrol show job -o` line.
std::map<std::string, std::string> ParseScontrolLine(const std::string& line);

// What Slurm's error text points at ("munge ...", "the Slurm controller ..."),
// or "" when nothing known.
std::string DiagnoseSlurmError(const std::string& stderr_text);

class SlurmPlacement final : public placement::Placement {
 public:
  static absl::StatusOr<std::unique_ptr<SlurmPlacement>> Create(const SlurmOptions& o);
  ~SlurmPlacement() override;

  std::string name() const override { return "slurm"; }
  absl::Status Start(placement::Sink* sink) override;
  void Stop() override;
  absl::Status Admissible(const placement::Job& job, bool wait_for_capacity) override;
  void Admit(const placement::Job& job) override;
  void Resume(const placement::Job& job, const std::string& ref) override;
  void Cancel(int64_t job) override;

 private:
  struct Tracked {
    placement::Job job;
    std::string slurm_id;      // "" until sbatch answered
    bool cancel = false;       // the user cancelled it
    bool cancel_sent = false;  // scancel succeeded
    bool ran = false;          // seen running at least once
    int32_t restarts = 0;      // Slurm's Restarts (requeues)
    std::string slurm_state;   // as last seen
    std::string last_report;   // the last observation sent, to send only changes
  };
  explicit SlurmPlacement(SlurmOptions o) : o_(std::move(o)) {}
  void Loop();
  void SubmitNew();
  void SendCancels();
  void PollStates();
  // sbatch for one job: the Slurm id, or an error naming what failed.
  absl::StatusOr<std::string> Sbatch(const placement::Job& job);
  // The observation for a job Slurm reports in `state` (with `reason`).
  placement::Observation Observe(Tracked& t, const std::string& state, const std::string& reason);
  placement::Observation Ended(const Tracked& t, const std::string& state);
  // `scontrol show job -o <id>`'s fields (empty when it fails).
  std::map<std::string, std::string> Details(const std::string& slurm_id);
  placement::Observation Forgotten(const Tracked& t);
  // Hands `o` to the sink unless the backend is stopping.
  void Report(const placement::Observation& o);
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(o_.command_timeout_ms); }

  const SlurmOptions o_;
  placement::Sink* sink_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Tracked> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace loom::runtime::service::slurm
