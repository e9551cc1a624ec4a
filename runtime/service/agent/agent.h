// The node agent: registers its CPU slots and GPUs with the coordinator,
// long-polls NodeService for launch and kill orders, starts one process per
// rank, and reports each rank's exit.
//
// Identity: the first registration presents the join token and receives the
// agent's id and secret; every later call (a re-registration too) presents
// "<id>:<secret>". When the coordinator no longer knows that credential (its
// job store was started over) the agent registers again with the join token
// under a new id.
//
// Every rank runs `worker_argv` in its own process group, with
// PR_SET_PDEATHSIG(SIGKILL) tied to the agent's order thread, an empty signal
// mask and default signal dispositions (whatever the agent blocks or ignores,
// a rank gets SIGTERM), stdout and stderr appended to
// <data_dir>/logs/<job>/rank<r>.{out,err}, and env LOOM_JOB_ID, LOOM_RANK,
// LOOM_WORLD_SIZE, LOOM_ATTEMPT, LOOM_GPU (-1 on CPU; GPU ranks also get
// CUDA_VISIBLE_DEVICES naming that GPU only, RankVisibleDevices), LOOM_ERROR_FILE (a
// worker writes its failure reason there; the agent sends it as the root
// cause) and LOOM_ALLOWED_ROOTS (the order's allowed_roots joined with ':',
// when the coordinator confines paths). A kill order sends SIGTERM to each rank's
// group, then SIGKILL to the group after the order's grace period. Stop()
// kills every group at once (SIGKILL) and reaps them.
//
// Log files are shipped to the coordinator (NodeService.AppendLogs) as they
// grow, each rank's final bytes before its exit is reported.
//
// Rendezvous: the agent hosts one store server (collectives StoreServer on
// `rendezvous_host`, an ephemeral port, reported at registration). For a job
// whose rank 0 it runs, it admits the attempt's secret as a tenant confined to
// "<job>/<attempt>/". Every rank gets LOOM_STORE_ADDR and LOOM_STORE_SECRET
// from its launch order, and LOOM_JOB_SPEC, the job spec as YAML in the log
// folder. With a rendezvous host other than loopback (a multi-node setup)
// ranks also get LOOM_COLLECTIVES_HOST, the address their collectives use. Rank 0 also gets LOOM_PROGRESS_FILE: it writes "<step>
// <checkpoint_step>" there and the agent reports changes (ReportProgress).
// Every rank gets LOOM_METRICS_FILE, where it appends one JSON object per
// step; a second thread of the agent ships new lines every 100 ms
// (ReportMetrics, agent_metrics.cc).
//
// Exit codes reported: the process' exit status, or -N when killed by
// signal N. Exit reports are durable across coordinator downtime: each is
// resent until the coordinator answers it, and kept (answered or not) until
// the coordinator sends a kill order for the job or a launch of a later
// attempt, which says it no longer needs them.
//
// Reconnecting: every NodeService response names the coordinator's
// incarnation. When it changes (a restarted coordinator), or a call answers
// NOT_FOUND for this agent (the coordinator declared it lost), the agent
// registers again with the same agent id, its running ranks and the ranks it
// holds exit reports for, so the coordinator adopts the whole placement; then
// it resends every kept exit report and the latest progress.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "collectives/store/store_server.h"
#include "proto/loom/v1/service.grpc.pb.h"

namespace loom::runtime::service::agent {

// CUDA_VISIBLE_DEVICES for a rank placed on the agent's GPU `gpu`: that
// entry of the agent's own list when it has one (`inherited`, e.g. "2,3"
// from a container runtime), else the index itself. The rank's device 0 is
// then the GPU the scheduler gave it; ranks sharing a GPU get the same value.
std::string RankVisibleDevices(int gpu, const char* inherited);

struct AgentOptions {
  std::string coordinator = "127.0.0.1:7070";
  std::string join_token;  // the coordinator's <data_dir>/join-token
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: insecure
  std::string data_dir;
  std::string hostname = "localhost";
  int cpu_slots = 1;
  int gpus = 0;
  int64_t memory_bytes = 0;  // host memory, reported at registration; 0: not reported
  std::vector<std::string> worker_argv;
  int poll_wait_ms = 200;
  // Where the rendezvous store listens: loopback unless the agent's ranks
  // span machines ("0.0.0.0" or the node's address).
  std::string rendezvous_host = "127.0.0.1";
};

// Whether a failed registration is worth another try before Start's
// deadline: no server yet (Unavailable), an attempt whose own 5 s ran out
// (DeadlineExceeded), or a transport failure gRPC reports without a code
// (Unknown: a TLS handshake cut short on a loaded machine). Anything the
// coordinator itself answers (a refused token, a bad request) is final.
bool TransientRegisterError(const absl::Status& s);

// The host threads of each rank an order starts (LOOM_NUM_THREADS in its
// environment): resources.threads_per_rank when set, otherwise the node's
// usable CPUs shared among the ranks that run once the order's start
// (`running` before it, `starting` in it), at least 1.
int RankThreads(int32_t threads_per_rank, int usable_cpus, int running, int starting);

// Milliseconds on the steady clock (the agent's thread timestamps).
int64_t SteadyMs();

class Agent {
 public:
  explicit Agent(AgentOptions o);
  ~Agent();
  // Registers and starts the order thread. A transient failure
  // (TransientRegisterError) is retried, the wait between tries doubling from
  // 100 ms to 5 s, until `timeout` has passed (a timeout <= 0: no deadline)
  // or `cancelled` returns true (checked between tries); each try after the
  // first few that fails is reported on stderr.
  absl::Status Start(std::chrono::milliseconds timeout = std::chrono::seconds(10),
                     const std::function<bool()>& cancelled = {});
  void Stop();
  const std::string& agent_id() const { return agent_id_; }
  // Ranks currently running (for tests and status).
  int running_ranks();
  // Ranks running and not being stopped (a share of the node's CPUs each).
  int live_ranks();
  // Process group ids of a job's running ranks.
  std::vector<pid_t> process_groups(const std::string& job_id);

 private:
  struct Proc {
    std::string job_id;
    int32_t rank = 0;
    int32_t attempt = 0;
    std::string error_file;
    std::chrono::steady_clock::time_point kill_at{};  // SIGKILL deadline once terminated
    bool terminating = false;
  };
  std::unique_ptr<grpc::ClientContext> Ctx(int timeout_ms);
  // Registers with the agent's credential, or the join token while it has
  // none (or the coordinator refuses the credential).
  absl::Status Register();
  absl::Status RegisterOnce();
  // Registers again after a coordinator restart; logs a failure (retried at
  // the next poll).
  void Reregister(const std::string& why);
  // True when `incarnation` names a coordinator other than the one this agent
  // registered with.
  bool NewIncarnation(const std::string& incarnation) const;
  void Loop();
  // Sends the exit reports the coordinator has not answered yet, in order.
  void DeliverExits();
  // Forgets kept exit reports of `job_id` with attempt below `attempt`
  // (INT32_MAX: every attempt).
  void DropExits(const std::string& job_id, int32_t attempt);
  void Launch(const v1::LaunchOrder& o);
  void Kill(const v1::KillOrder& o);
  void ReapAndEscalate();
  void ShipLogs();
  void ShipProgress();
  // The metrics thread: every kMetricsPollMs ships the new lines of the
  // ranks' metrics files (agent_metrics.cc). The order thread also ships
  // them before it reports exits, so a job's last points precede its end.
  void MetricsLoop();
  void ShipMetrics();  // one caller at a time (ship_mu_)
  // The heartbeat thread: a Heartbeat call every interval the coordinator
  // gave at registration, so a slow pass of the order thread (a log upload
  // to a busy coordinator) never reads as a dead agent. It beats only while
  // the order thread has finished a pass within kStuckOrderLoopMs, so an agent
  // whose order thread is wedged is still declared lost (agent_heartbeat.cc).
  void HeartbeatLoop();

  struct LogFile {
    std::string job_id;
    int32_t rank = 0;
    std::string stream;
    int64_t shipped = 0;
  };
  std::map<std::string, LogFile> logs_;  // path -> progress (order thread only)
  struct Progress {
    std::string job_id;
    int32_t attempt = 0;
    std::string last;  // the file's content when last reported
  };
  std::map<std::string, Progress> progress_;  // progress file -> state (order thread)
  struct ExitReport {
    v1::ReportExitRequest req;
    bool delivered = false;  // answered by the current incarnation
  };
  std::vector<ExitReport> exits_;  // oldest first (order thread; Register reads it under mu_)
  std::string incarnation_;        // of the coordinator this agent registered with
  bool must_register_ = false;     // a call answered NOT_FOUND for this agent
  std::atomic<int> heartbeat_ms_{1000};          // the coordinator's interval, from registration
  std::atomic<int64_t> order_pass_ms_{0};        // steady-clock ms when the order thread last finished a pass
  std::unique_ptr<collectives::store::StoreServer> store_;
  std::map<std::string, std::string> tenants_;  // job id -> admitted secret (order thread)

  AgentOptions opts_;
  std::unique_ptr<v1::NodeService::Stub> stub_;
  std::string agent_id_;
  std::string secret_;  // from the first registration; "" until then
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::thread metrics_thread_;
  std::thread heartbeat_thread_;
  std::mutex ship_mu_;  // serialises ShipMetrics
  std::mutex mu_;  // procs_, metric_files_; agent_id_ and secret_ writes
  std::map<pid_t, Proc> procs_;
  struct MetricFile {
    std::string job_id;
    int32_t rank = 0;
    int32_t attempt = 0;
    int64_t shipped = 0;  // bytes of complete lines reported
  };
  std::map<std::string, MetricFile> metric_files_;  // LOOM_METRICS_FILE of each rank
};

}  // namespace loom::runtime::service::agent
