// Level-triggered, idempotent reconcile of one TrainingJob (loom.dev/v1).
//
// Each Reconcile(ns, name) reads the job and its children and makes one pass
// toward the desired state; running it again with nothing changed makes no
// writes. Children (all labelled loom.dev/job=<name>, owned by the job with a
// controller ownerReference, and stamped with a loom.dev/spec-hash annotation):
//   Secret     <name>-token        the coordinator's user token and agents' join token (made once)
//   Service    <name>-coordinator  gRPC :7070
//   Deployment <name>-coordinator  `loom coordinator`, replicas 0 when suspended
//   Pod        <name>-agent-<i>    `loom agent`, i < numNodes (0 when suspended)
//   PodGroup   <name>              only with scheduling.gang.podGroup
// The job gets the finalizer loom.dev/cleanup; on deletion the reconciler
// cancels the Loom job, deletes the children and then drops the finalizer.
//
// The Loom job is submitted through the coordinator (CoordinatorClient) with
// idempotency key "<uid>-<attempt>" and max_restarts = runPolicy.backoffLimit;
// its JobStatus maps to status.state and conditions:
//   PENDING, SCHEDULED -> Created (Restarting once restart_count > 0);
//   RUNNING -> Running;  RESTARTING -> Restarting;
//   SUCCEEDED -> Succeeded;  FAILED, CANCELLED -> Failed;  suspend -> Suspended.
// Suspend cancels the Loom job and scales to zero; resume submits attempt+1,
// which continues from the latest checkpoint in spec.job.checkpoint.dir.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "deploy/operator/kube_client.h"
#include "proto/loom/v1/service.pb.h"

namespace loom::deploy::operator_ {

// The coordinator's JobService, as the reconciler needs it.
class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;
  virtual absl::StatusOr<v1::JobStatus> Submit(const v1::JobSpec& spec, const std::string& key) = 0;
  virtual absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) = 0;
  virtual absl::Status Cancel(const std::string& job_id) = 0;
  // Streams JobService.WatchJob: calls `on_event` for each state or progress
  // change until the job is terminal (OK), `*stop` is set (Cancelled) or the
  // stream fails. The default has no stream (Unimplemented).
  virtual absl::Status Watch(const std::string& job_id, const std::function<void(const v1::JobStatus&)>& on_event,
                             const std::atomic<bool>* stop) {
    (void)job_id, (void)on_event, (void)stop;
    return absl::UnimplementedError("this coordinator client cannot watch");
  }
};

// Makes a client for a coordinator address and token (nullptr: unreachable).
using CoordinatorConnector =
    std::function<std::unique_ptr<CoordinatorClient>(const std::string& address, const std::string& token)>;

// gRPC implementation over loom.v1.JobService (insecure channel, bearer token).
std::unique_ptr<CoordinatorClient> MakeGrpcCoordinatorClient(const std::string& address, const std::string& token);

struct ReconcilerOptions {
  std::string default_image = "loom";
  std::function<absl::Time()> now = [] { return absl::Now(); };
  // How often a live job's coordinator status is polled (a fallback when a
  // WatchJob stream is running: its events trigger reconciles as they come).
  absl::Duration poll_interval = absl::Seconds(5);
  // Called (from a watcher thread) on every WatchJob event of a live job; the
  // operator re-queues the TrainingJob. Unset: no watchers, polling only.
  std::function<void(const std::string& ns, const std::string& name)> on_job_event;
  // Coordinator address for a job; default "<name>-coordinator.<ns>.svc:7070".
  // The annotation loom.dev/coordinator-address overrides it per job.
  std::function<std::string(const std::string& ns, const std::string& name)> coordinator_address;
  // The most nvidia.com/gpu one node of the cluster offers (loom_operator
  // --max-gpus-per-node); a device: cuda job whose agent pod asks for more is
  // refused. 0: not checked.
  int max_gpus_per_node = 0;
};

// A device: cuda job's GPUs, checked before it is submitted: each of the
// numNodes agent pods holds ceil(dp x tp / numNodes) ranks, ranks_per_gpu of
// them to a GPU, so it must ask for at least that many GPUs
// (spec.resources nvidia.com/gpu), and no more than a node offers.
// InvalidArgument naming parallel.tp and nvidia.com/gpu otherwise.
absl::Status CheckPodGpus(const Json& spec, const v1::JobSpec& job, int max_gpus_per_node);

struct ReconcileResult {
  bool requeue = false;
  absl::Duration requeue_after = absl::ZeroDuration();
  bool gone = false;  // the job no longer exists
};

class Reconciler {
 public:
  Reconciler(KubeApi* api, CoordinatorConnector connect, ReconcilerOptions opts = {});
  ~Reconciler();  // stops and joins the watcher threads
  absl::StatusOr<ReconcileResult> Reconcile(const std::string& ns, const std::string& name);

  // The children the job wants right now (for `loom_operator --render` and
  // tests); secrets get an empty token.
  static Json DesiredChildren(const Json& job, const ReconcilerOptions& opts);

 private:
  struct JobView;    // the fields of the TrainingJob that one pass reads
  struct AgentPods;  // the job's agent pods, counted by phase

  absl::Status Finalize(const std::string& ns, Json job);
  absl::StatusOr<bool> Ensure(const Resource& r, const std::string& ns, const Json& desired);

  // The steps of one Reconcile pass, in order. Each reads the job through
  // `v`, edits the status object that the pass writes back at its end, and
  // sets `result.requeue` where it wants another pass soon.
  absl::Status EnsureChildren(const JobView& v, bool terminal, AgentPods& pods, ReconcileResult& result);
  absl::Status EnsureAgentPods(const JobView& v, const Json& children, bool terminal, const AgentPods& pods,
                               ReconcileResult& result);
  absl::Status SyncLoomJob(const JobView& v, bool terminal, const AgentPods& pods, Json& status,
                           ReconcileResult& result);
  absl::Status SuspendLoomJob(const JobView& v, const std::string& address, Json& status);
  absl::StatusOr<v1::JobStatus> SubmitOrGet(const JobView& v, CoordinatorClient& c, Json& status,
                                            ReconcileResult& result);
  void WatchOrStop(const JobView& v, const std::string& address, const v1::JobStatus& j);
  void CheckGang(const JobView& v, const AgentPods& pods, Json& status);
  absl::Status ScheduleNextPass(const JobView& v, const Json& status, ReconcileResult& result);
  // The job's coordinator address: the loom.dev/coordinator-address
  // annotation, else ReconcilerOptions::coordinator_address, else the Service.
  std::string CoordinatorAddress(const std::string& ns, const Json& job) const;
  // A client for the job's coordinator with the token from its Secret
  // (nullptr: no token yet, or unreachable).
  std::unique_ptr<CoordinatorClient> Connect(const JobView& v, const std::string& address);

  // One WatchJob stream per live Loom job (key "ns/name"), started by
  // Reconcile and ended when the job is terminal or another job id replaces it.
  void EnsureWatcher(const std::string& ns, const std::string& name, const std::string& job_id,
                     const std::string& address, const std::string& token);
  void StopWatcher(const std::string& key);
  struct Watcher {
    std::string job_id;
    std::unique_ptr<std::atomic<bool>> stop;
    std::thread thread;
  };
  std::map<std::string, Watcher> watchers_;

  KubeApi* api_;
  CoordinatorConnector connect_;
  ReconcilerOptions opts_;
};

inline constexpr char kFinalizer[] = "loom.dev/cleanup";
inline constexpr char kJobLabel[] = "loom.dev/job";
inline constexpr char kRoleLabel[] = "loom.dev/role";
inline constexpr char kHashAnnotation[] = "loom.dev/spec-hash";

}  // namespace loom::deploy::operator_
