// The coordinator's job logic, independent of gRPC: validates submissions,
// persists them in the JobStore before acknowledging, queues and gang-places
// them with the Scheduler, hands launch/kill orders to agents, and drives the
// lifecycle PENDING -> SCHEDULED -> RUNNING -> (RESTARTING -> RUNNING)* ->
// SUCCEEDED | FAILED | CANCELLED from the agents' exit reports, or from what
// another placement backend observes (CoordinatorOptions::make_placement;
// the Slurm backend reports Slurm's view of each job through the same
// transitions: Observe).
//
// Errors follow gRPC conventions (absl codes map 1:1): InvalidArgument names
// the field ("spec.model.n_head: ..."), NotFound, FailedPrecondition (a job
// larger than the cluster without wait_for_capacity, cancelling a finished
// job, a reused idempotency key with another spec), ResourceExhausted (queue
// full). A refused call changes no state.
//
// Exit codes: 0 is success; kExitConfigError (2) is a bad configuration and
// 126/127 a worker that cannot be executed: never retried; anything else
// restarts the whole group while the job's max_restarts budget lasts. Ranks
// that had not exited when the job ended are recorded as kExitUnknown. An agent silent for 3 heartbeat intervals is lost:
// its jobs restart elsewhere (or wait) within the same budget.
//
// Agents: the join token registers a new agent, which gets an id that is
// never reused (persisted in the store) and a secret (only its SHA-256 is
// kept); with mutual TLS the id is bound to the certificate identity it
// registered with. Every later NodeService call authenticates as one agent
// (AuthenticateAgent) and may act only for it: exit reports for ranks placed on
// it, progress for a job whose rank 0 it holds, logs for ranks it ran. Anything
// else is PERMISSION_DENIED, logged to stderr and counted in
// loom_node_calls_refused_total{call}.
//
// Thread-safe: one mutex guards the in-memory state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/service.pb.h"
#include "runtime/service/job_metrics.h"
#include "runtime/service/metrics/metrics.h"
#include "runtime/service/placement/placement.h"
#include "runtime/service/scheduler.h"
#include "runtime/service/store/job_store.h"

namespace loom::runtime::service {

inline constexpr int kExitConfigError = 2;
inline constexpr int kExitUnknown = -1000;
bool IsRetryableExit(int code);

struct CoordinatorOptions {
  std::string data_dir;
  // Start an empty job store where the data folder held one whose loom.db is
  // now missing or empty (StoreOptions::init); refused without it.
  bool init = false;
  int max_queued_jobs = 10000;
  // Run folders of jobs that set no run_dir: <run_root>/<name>-<job id>, put
  // into their launch orders. "" (the embedded coordinator of `loom run`):
  // the worker's own default, runs/<name>-<time> under its working folder.
  std::string run_root;
  // Folders named at start that jobs may read from and write in (data,
  // init_from, checkpoints, run folders).
  std::vector<std::string> data_roots;
  // Every path of a spec (data.path, run_dir, checkpoint.dir, init_from) must
  // resolve, symlinks followed (jobspec/confine.h), inside one of these
  // folders; `..` is always refused. Empty: run_root and data_roots. With all
  // three empty, paths are not confined (`loom run`: the user's own spec, run
  // with the user's own rights). run_root must lie inside allowed_roots. No
  // root may contain ':' (launch orders pass them to workers as a list).
  std::vector<std::string> allowed_roots;
  int heartbeat_interval_ms = 1000;
  // After a restart, how long reloaded jobs wait for agents to reclaim their
  // running ranks: the larger of this and 3 heartbeat intervals, counted from
  // StartReclaimClock() (the moment the server listens).
  int reclaim_grace_ms = 5000;
  int kill_grace_ms = 10000;  // SIGTERM -> SIGKILL grace in kill orders
  metrics::Registry* metrics = nullptr;  // optional; must outlive the coordinator
  // Optional deeper check of a submitted spec's model (an ONNX file is
  // imported with the job's shapes: runtime/train/onnx_model.h); its error,
  // prefixed "spec.", refuses the job as InvalidArgument.
  std::function<absl::Status(const v1::JobSpec&)> check_model;
  // Where jobs run (placement/placement.h). Unset: the built-in agents
  // (NodeService, the Scheduler). Set: called once by Create, e.g. for the
  // Slurm backend (runtime/service/slurm); its error stops Create.
  std::function<absl::StatusOr<std::unique_ptr<placement::Placement>>()> make_placement;
};

// Who makes a NodeService call, as the server authenticated it.
struct AgentCaller {
  bool join = false;          // presented the join token (RegisterAgent of a new agent)
  std::string agent_id;       // the authenticated agent (empty with `join`)
  std::string cert_identity;  // the peer certificate's identity under mutual TLS, else ""
};

std::string FormatJobId(int64_t id);
// "job-<n>" -> n; InvalidArgument naming `job_id` otherwise.
absl::StatusOr<int64_t> ParseJobId(const std::string& s);

class AgentPlacement;

class Coordinator : private placement::Sink {
 public:
  // Opens the store in options.data_dir and reloads unfinished jobs.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(const CoordinatorOptions& options);
  ~Coordinator();

  // `submitter`: the name of the caller's token, recorded with a new job.
  absl::StatusOr<v1::SubmitJobResponse> Submit(const v1::SubmitJobRequest& req,
                                               const std::string& submitter = "default");
  absl::StatusOr<v1::GetJobResponse> Get(const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest& req);
  // The job's state history (store events), oldest first.
  absl::StatusOr<std::vector<store::JobEventRecord>> History(const std::string& job_id);
  // Registered agents: resources, last heartbeat, ranks placed on them.
  v1::ListAgentsResponse ListAgents();
  // The job's metric points with step > after_step, ascending by step.
  absl::StatusOr<std::vector<v1::MetricPoint>> Metrics(const std::string& job_id, int64_t after_step);
  // Points of the job that arrived after sequence number `seq`, and the
  // sequence number to pass next time.
  std::vector<v1::MetricPoint> MetricsAfterSeq(int64_t job, uint64_t* seq);
  // New bytes of the job's log files after `offsets` ("<rank>.<stream>" ->
  // bytes already read; advanced by what is returned), rank -1: all ranks;
  // at most max_bytes in all, in chunks of at most 64 KiB.
  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(const std::string& job_id, int32_t rank,
                                                     std::map<std::string, int64_t>* offsets, int64_t max_bytes);
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id);
  // Blocks until the state version moves past `seen` or `timeout` passes;
  // returns the current version (watchers poll Get after each change).
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout);

  // OK when `secret` is agent `agent_id`'s (and, when it registered with a
  // client certificate, `cert_identity` is that certificate's);
  // UNAUTHENTICATED otherwise, saying no more than "wrong agent credential".
  absl::Status AuthenticateAgent(const std::string& agent_id, const std::string& secret,
                                 const std::string& cert_identity);
  // A join-token caller gets a new id and secret (req.agent_id must be empty);
  // an authenticated agent registers again under its own id.
  absl::StatusOr<v1::RegisterAgentResponse> RegisterAgent(const v1::RegisterAgentRequest& req,
                                                          const AgentCaller& caller);
  // Logs a NodeService call refused for acting outside its caller's agent and
  // returns PERMISSION_DENIED with `why`.
  absl::Status RefuseNodeCall(const std::string& call, const std::string& agent_id, const std::string& why);
  absl::Status Heartbeat(const std::string& agent_id);
  // Records that an authenticated NodeService call of agent `agent_id`
  // arrived at `at`. The server stamps each call on arrival, before it waits
  // for anything, so time a call spends queued behind the coordinator's own
  // work never counts as the agent's silence.
  void NoteHeard(const std::string& agent_id, std::chrono::steady_clock::time_point at);
  // Long poll: waits up to min(wait_ms, 5000, the heartbeat interval) ms for
  // orders, so a waiting agent is never silent for longer than an interval.
  absl::StatusOr<v1::PollOrdersResponse> PollOrders(const std::string& agent_id, int wait_ms);
  absl::Status ReportExit(const v1::ReportExitRequest& req);
  // Step and checkpoint progress (never moves backwards) and the rendezvous
  // address; reports for earlier attempts or finished jobs are ignored.
  absl::Status ReportProgress(const v1::ReportProgressRequest& req);
  // Writes a rank's log bytes at `offset` in <data_dir>/logs/<job>/rank<r>.<stream>
  // and indexes the file for StreamLogs.
  absl::Status AppendLogs(const v1::AppendLogsRequest& req);
  // Metric points for ranks placed on the calling agent (PERMISSION_DENIED
  // otherwise); points of earlier attempts or finished jobs are ignored.
  absl::Status ReportMetrics(const v1::ReportMetricsRequest& req);
  // Declares agents lost after 3 missed heartbeats (also run by a background
  // thread every heartbeat interval). Silence counts only while the
  // coordinator could hear: after a stall of its own (checks more than two
  // intervals apart: a slow store write holding its lock, the process paused)
  // every agent has 3 fresh intervals to call in. After a restart, it also requeues (as a
  // restart) placed jobs whose ranks no reconnecting agent reclaimed within 3
  // heartbeat intervals.
  void CheckAgents();
  // Starts the reclaim grace of reloaded jobs; called once the server listens.
  // Until then no reloaded job is given up.
  void StartReclaimClock();
  // Random id of this coordinator process, sent in every NodeService response
  // so that agents notice a restart and register again.
  const std::string& incarnation() const { return incarnation_; }

  // Wakes long polls and watchers so a server shutdown does not wait for
  // them; calls made afterwards still work but no longer block.
  void Stop();
  bool stopping();

  store::JobStore* store() { return store_.get(); }
  // "agents" or the backend's name ("slurm").
  std::string backend() const { return placement_->name(); }

 private:
  friend class AgentPlacement;
  struct AgentInfo {
    v1::AgentResources resources;
    std::string hostname;
    std::chrono::steady_clock::time_point last_seen;
    int64_t last_seen_unix_ms = 0;
    std::deque<v1::Order> orders;
    std::string rendezvous_address;  // the agent's store, for jobs it hosts
  };
  struct LiveJob {
    Demand demand;
    std::set<std::string> awaiting_launch;  // agents yet to take the launch order
    std::map<int32_t, int32_t> exits;       // rank -> code, this attempt
    std::string last_wait_reason;
    std::string rendezvous_address;
  };

  Coordinator(const CoordinatorOptions& o, std::unique_ptr<store::JobStore> s);
  // placement::Sink: a backend's reports, applied under mu_.
  void Placed(int64_t job, const std::string& ref, const std::string& log_path, const std::string& where) override;
  void Observe(const placement::Observation& o) override;
  // Moves a live job forward to RUNNING through the allowed transitions
  // (PENDING -> SCHEDULED -> RUNNING, RESTARTING -> RUNNING); false when the
  // store refused (the job ended meanwhile).
  bool AdvanceToRunningLocked(int64_t id, const std::string& msg);
  placement::Job JobFor(const store::JobRecord& r, const v1::JobSpec& spec) const;
  // The run folder the job gets: its run_dir, else <run_root>/<name>-<job id>
  // ("" when neither: the worker's own default).
  std::string RunDirFor(int64_t id, const v1::JobSpec& spec) const;
  absl::Status ValidateSpec(v1::JobSpec& spec) const;
  v1::JobStatus ToStatus(const store::JobRecord& r) const;
  void RunScheduleLocked();
  void LaunchLocked(const store::JobRecord& r, const std::vector<Slot>& slots);
  void KillLocked(int64_t job_id, const std::vector<Slot>& slots);
  void AdoptLocked(const std::string& agent_id, const v1::RunningJob& running);
  void RestartOrFailLocked(store::JobRecord r, int32_t rank, int32_t code, const std::string& why);
  void FinishLocked(int64_t id, const std::function<void(store::JobRecord&)>& fn, const std::string& msg);
  void NotifyLocked();
  void UpdateGaugesLocked();
  // Records that `agent` runs `rank` of `job` (its logs are accepted from it).
  void AddRankOwnerLocked(int64_t job, int32_t rank, const std::string& agent);
  // A finished job's owners are dropped once 4096 later jobs have finished.
  void ForgetOwnersLaterLocked(int64_t job);
  // Whether the current placement of live job `job` puts `rank` on `agent`.
  bool PlacedOnLocked(int64_t job, int32_t rank, const std::string& agent) const;
  // Keeps what ListAgents shows of agent `id`, about to be dropped as lost.
  void RememberLostLocked(const std::string& id);
  absl::Status RefuseLocked(const std::string& call, const std::string& agent_id, const std::string& why);
  // A report's prelude: `agent_id` must be a known agent (its heartbeat is
  // refreshed), and job `id` (named `job_id` in errors) must exist.
  absl::StatusOr<store::JobRecord> ReportedJobLocked(const std::string& agent_id, int64_t id,
                                                     const std::string& job_id);

  const CoordinatorOptions opts_;
  std::unique_ptr<store::JobStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t version_ = 0;
  Scheduler sched_;
  std::map<std::string, AgentInfo> agents_;
  std::map<std::string, AgentInfo> lost_agents_;  // the most recently lost (ListAgents)
  std::map<int64_t, LiveJob> live_;
  JobMetrics metrics_;
  std::vector<std::string> roots_;  // the folders spec paths are confined to; empty: not confined
  struct Credential {
    std::string secret_sha256;
    std::string cert_identity;
  };
  std::map<std::string, Credential> credentials_;  // every agent identity issued
  // Agents that ran each rank (job -> rank -> agents), kept for the most
  // recently finished jobs too so their last log bytes are accepted.
  std::map<int64_t, std::map<int32_t, std::set<std::string>>> rank_owners_;
  std::deque<int64_t> finished_owners_;
  // Jobs reloaded in SCHEDULED/RUNNING/RESTARTING, awaiting their agents.
  std::set<int64_t> unclaimed_;
  // CheckAgents' previous run, and the end of the coordinator's last stall.
  std::chrono::steady_clock::time_point last_check_{}, responsive_since_{};
  // When each agent's latest call arrived (NoteHeard); its own lock, so a
  // stamp never waits for mu_.
  std::mutex heard_mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> heard_;
  std::chrono::steady_clock::time_point reclaim_deadline_ = std::chrono::steady_clock::time_point::max();
  std::string incarnation_;
  bool stopping_ = false;
  std::thread monitor_;
  std::unique_ptr<placement::Placement> placement_;

  metrics::Family<metrics::Gauge>* m_jobs_ = nullptr;
  metrics::Family<metrics::Gauge>* m_queue_ = nullptr;
  metrics::Family<metrics::Gauge>* m_agents_ = nullptr;
  metrics::Family<metrics::Counter>* m_submitted_ = nullptr;
  metrics::Family<metrics::Counter>* m_restarts_ = nullptr;
  metrics::Family<metrics::Counter>* m_steps_ = nullptr;
  metrics::Family<metrics::Histogram>* m_sched_latency_ = nullptr;
  metrics::Family<metrics::Counter>* m_refused_ = nullptr;
};

}  // namespace loom::runtime::service
