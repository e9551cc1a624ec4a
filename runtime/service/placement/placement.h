// Where the coordinator's jobs run: the placement interface between the
// coordinator's job lifecycle (one state machine, in coordinator.cc over the
// job store) and a backend that starts and stops the jobs' processes.
//
// Two backends implement it: the built-in agents (the coordinator's scheduler
// gang-places ranks onto registered `loom agent`s; coordinator.cc) and Slurm
// (runtime/service/slurm: each job one batch job through sbatch, polled with
// squeue / scontrol). A backend never writes the job store itself: it reports
// through a Sink, and the coordinator turns each report into the same state
// transitions (PENDING -> SCHEDULED -> RUNNING -> (RESTARTING -> RUNNING)* ->
// SUCCEEDED | FAILED | CANCELLED) that the agents' exit reports drive.
//
// Threading: the coordinator calls a Placement under its own lock, so those
// calls must not block (no subprocess, no network): a backend that needs
// either does it on a thread of its own. A backend calls its Sink without
// holding any lock of its own.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/loom/v1/service.pb.h"

namespace loom::runtime::service::placement {

// A job as the coordinator hands it to a backend (validated, defaults applied).
struct Job {
  int64_t id = 0;
  std::string job_id;  // "job-<n>"
  v1::JobSpec spec;
  int32_t world_size = 0;
  int32_t priority = 0;
  v1::JobState state = v1::PENDING;
  int32_t restart_count = 0;
  std::string run_dir;  // the run folder the coordinator gives the job
};

// What a backend saw of a job. The coordinator applies it: states it may not
// move to from the stored one (a job already terminal, say) are ignored.
struct Observation {
  int64_t job = 0;
  // PENDING (waiting, with wait_reason), RUNNING, SUCCEEDED, FAILED or CANCELLED.
  v1::JobState state = v1::PENDING;
  std::string wait_reason;
  int32_t restarts = 0;       // restarts so far, as the backend counts them
  int32_t exit_code = 0;      // FAILED: the job's exit status (-N: signal N)
  std::string root_cause;     // FAILED: what the backend knows of why
  int64_t current_step = -1;  // progress read by the backend; -1: unknown
  std::string message;        // the event recorded with a state change
};

// The coordinator's side, called by a backend from its own thread.
class Sink {
 public:
  virtual ~Sink() = default;
  // The job was handed to the backend's scheduler under `ref` (durable with
  // the job, given back to Resume after a coordinator restart); its output
  // is readable at `log_path` ("" if none) as rank 0's stdout.
  virtual void Placed(int64_t job, const std::string& ref, const std::string& log_path, const std::string& where) = 0;
  virtual void Observe(const Observation& o) = 0;
};

class Placement {
 public:
  virtual ~Placement() = default;
  virtual std::string name() const = 0;
  // Called once, after the coordinator reloaded its jobs (Resume) and before
  // it serves; `sink` outlives Stop().
  virtual absl::Status Start(Sink* sink) = 0;
  // Stops the backend's threads; after it returns the Sink is not called.
  virtual void Stop() = 0;
  // Whether a new job may be queued at all (FailedPrecondition saying why
  // not); called before the job is stored.
  virtual absl::Status Admissible(const Job& job, bool wait_for_capacity) = 0;
  // A new job, PENDING in the store: place it when it can.
  virtual void Admit(const Job& job) = 0;
  // A job reloaded after a coordinator restart, with the ref Placed stored
  // ("" when it was never placed).
  virtual void Resume(const Job& job, const std::string& ref) = 0;
  // The user cancelled the job (already CANCELLED in the store): stop it.
  virtual void Cancel(int64_t job) = 0;
};

}  // namespace loom::runtime::service::placement
