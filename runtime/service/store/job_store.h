// The coordinator's durable job store: one SQLite database (WAL journal,
// synchronous=FULL) at <data_dir>/loom.db.
//
// Tables: `jobs` (one row per submission: idempotency key UNIQUE, serialized
// JobSpec, state, priority, timestamps, restart count, per-rank exit codes,
// root cause, last checkpoint step, wait reason), `events` (append-only history
// of every job's state changes and notes), `logs` (index of per-rank log
// files) and `placement_refs` (a backend's handle of a job, e.g. its Slurm
// job id). Every mutating call commits before it returns, so a caller that
// acknowledges after the call returns only acknowledges durable data: the
// row survives kill -9 of the process and power loss (synchronous=FULL fsyncs
// the WAL at each commit).
//
// Terminal states (SUCCEEDED, FAILED, CANCELLED) never change: Update refuses
// with FailedPrecondition, and a trigger in the database refuses any UPDATE of
// a terminal row as a second line of defence. Illegal transitions (e.g.
// PENDING -> RUNNING) are FailedPrecondition too.
//
// The data folder (data_dir.h): Open takes <data_dir>/lock for the store's
// life (a second store on the folder is FailedPrecondition), and refuses to
// start over a missing or 0-byte loom.db in a folder whose store.marker says a
// store lived there, unless StoreOptions::init. Job and agent ids come from
// AUTOINCREMENT sequences; a loom.db recreated under a marker starts them past
// the marker's reservations, so an id is never handed out twice, even across a
// lost loom.db. (A backup of the whole folder brings back its own marker: ids
// handed out after that backup can repeat once it is restored.)
//
// A job records `submitter`, the name of the token that submitted it (a column
// added in place to a loom.db that lacks it).
//
// `agents` holds every agent identity ever issued: id ("agent-<n>[-<host>]",
// never reused), the SHA-256 of its secret, and the certificate identity it
// registered with under mutual TLS.
//
// Thread-safe (one connection behind a mutex). Not for use across fork().
//
//   LOOM_ASSIGN_OR_RETURN(auto store, JobStore::Open("/var/lib/loom"));
//   LOOM_ASSIGN_OR_RETURN(auto r, store->InsertJob(req));
//   store->Update(r.job.id, [](JobRecord& j) { j.state = v1::SCHEDULED; }, "placed");
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/service.pb.h"
#include "runtime/service/store/data_dir.h"

struct sqlite3;

namespace loom::runtime::service::store {

bool IsTerminal(v1::JobState s);
// Whether the lifecycle allows from -> to (same state counts as allowed).
bool IsAllowedTransition(v1::JobState from, v1::JobState to);

struct JobRecord {
  int64_t id = 0;
  std::string idempotency_key;
  std::string name;
  std::string spec;  // serialized loom.v1.JobSpec
  v1::JobState state = v1::PENDING;
  int32_t priority = 0;
  int32_t world_size = 0;
  int64_t submit_ms = 0;
  int64_t update_ms = 0;
  int32_t restart_count = 0;
  std::vector<int32_t> exit_codes;
  int32_t root_cause_rank = -1;
  std::string root_cause;
  int64_t last_checkpoint_step = -1;
  int64_t current_step = 0;
  std::string wait_reason;
  std::string submitter;  // the name of the token that submitted the job
};

struct NewJob {
  std::string idempotency_key;  // empty: no dedupe
  std::string name;
  std::string spec;
  int32_t priority = 0;
  int32_t world_size = 0;
  std::string submitter;
};

struct JobEventRecord {
  int64_t id = 0;
  int64_t job_id = 0;
  int64_t time_ms = 0;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::string message;
};

struct LogRecord {
  int64_t job_id = 0;
  int32_t rank = 0;
  std::string stream;
  std::string path;
};

struct AgentRecord {
  std::string id;
  std::string hostname;
  std::string secret_sha256;  // hex
  std::string cert_identity;  // "" when it registered without a client certificate
  int64_t created_ms = 0;
};

struct StoreOptions {
  // Start an empty store although the folder's marker says one lived there
  // (loom.db missing or 0 bytes). Ids continue after the marker's reservations.
  bool init = false;
  // Ids the marker reserves per write (one fsync'd file write per block).
  int64_t id_block = 1000;
};

struct ListQuery {
  std::vector<v1::JobState> states;  // empty: all
  std::string name_prefix;
  // Exclusive bound of the page: ids above it, or below it with
  // newest_first (0 there: from the newest job).
  int64_t after_id = 0;
  int limit = 50;
  bool newest_first = false;  // descending id
};

class JobStore {
 public:
  // Creates data_dir (mode 0700), the schema and the marker when missing.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& data_dir,
                                                        const StoreOptions& options = {});
  ~JobStore();

  struct InsertResult {
    JobRecord job;
    bool existing = false;  // the idempotency key matched an earlier row
  };
  // Durable when it returns. A known key returns the earlier job (existing =
  // true) when the spec is identical, FailedPrecondition otherwise.
  absl::StatusOr<InsertResult> InsertJob(const NewJob& job);

  absl::StatusOr<JobRecord> GetJob(int64_t id);  // NotFound when absent
  absl::StatusOr<JobRecord> FindByKey(const std::string& idempotency_key);  // NotFound when absent
  // Ascending id, or descending with q.newest_first.
  absl::StatusOr<std::vector<JobRecord>> ListJobs(const ListQuery& q);
  // How many jobs match q's states and name prefix (after_id and limit ignored).
  absl::StatusOr<int64_t> CountJobs(const ListQuery& q);
  // Non-terminal jobs, ascending id (for reload after a restart).
  absl::StatusOr<std::vector<JobRecord>> ActiveJobs();

  // Reads the job, lets `fn` change it, writes it back in one transaction.
  // `id` and the submission fields (key, name, spec, submit time) are kept.
  // A state change appends an event with `message`. FailedPrecondition when
  // the stored state is terminal or the transition is not allowed (nothing is
  // written then).
  absl::StatusOr<JobRecord> Update(int64_t id, const std::function<void(JobRecord&)>& fn,
                                   const std::string& message = "");

  // Progress of a live job: its step and checkpoint step, each raised to the
  // given value if larger (never lowered); terminal jobs are left as they
  // are. Written without an fsync of its own (synchronous=NORMAL for this
  // transaction): progress comes often, agents report it again to a
  // restarted coordinator, and the WAL keeps commits in order, so the next
  // durable write (any state change) makes it durable too. What a power cut
  // can cost is the progress since the last durable write, never a state.
  absl::Status UpdateProgress(int64_t id, int64_t step, int64_t checkpoint_step);

  // Sets the wait reason of many live jobs in one transaction; terminal jobs
  // are skipped. Written like UpdateProgress, without an fsync of its own:
  // the reasons are recomputed at every scheduling pass.
  absl::Status SetWaitReasons(const std::vector<std::pair<int64_t, std::string>>& reasons);

  absl::Status AppendEvent(int64_t job_id, const std::string& message);
  absl::StatusOr<std::vector<JobEventRecord>> Events(int64_t job_id, int64_t after_event_id = 0);

  // A new agent identity, durable when it returns. The id's host part is
  // `hostname` reduced to [a-z0-9.-] (at most 32 bytes).
  absl::StatusOr<AgentRecord> InsertAgent(const std::string& hostname, const std::string& secret_sha256,
                                          const std::string& cert_identity);
  absl::StatusOr<std::vector<AgentRecord>> Agents();

  absl::Status AddLog(const LogRecord& log);
  absl::StatusOr<std::vector<LogRecord>> Logs(int64_t job_id);

  // The placement backend's handle of a job (the Slurm job id), kept so a
  // restarted coordinator finds its jobs again (placement/placement.h).
  absl::Status SetPlacementRef(int64_t job_id, const std::string& ref);
  absl::StatusOr<std::map<int64_t, std::string>> PlacementRefs();  // job id -> ref

  absl::StatusOr<std::map<v1::JobState, int64_t>> CountByState();
  // "ok" when PRAGMA integrity_check finds nothing wrong.
  absl::StatusOr<std::string> IntegrityCheck();
  // The value of a PRAGMA on this connection (e.g. "journal_mode" -> "wal").
  absl::StatusOr<std::string> Pragma(const std::string& name);
  // Runs raw SQL (maintenance and tests); errors carry SQLite's message.
  absl::Status ExecRaw(const std::string& sql);

  const std::string& path() const { return path_; }

 private:
  JobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  // Starts the `kind` sequence past the marker's reservation when loom.db is
  // older than the marker; brings marker and loom.db's copy up to date.
  absl::Status ApplyIdFloorLocked(const std::string& kind);
  // Inside the transaction that commits `id`: grows the reservation past it
  // (marker first, then loom.db's copy).
  absl::Status ReserveLocked(const std::string& kind, int64_t id);
  absl::Status SetReservedLocked(const std::string& kind, int64_t reserved);
  absl::StatusOr<JobRecord> GetLocked(int64_t id);
  absl::StatusOr<std::vector<JobRecord>> QueryLocked(const std::string& sql,
                                                     const std::function<absl::Status(void*)>& bind);
  absl::Status Exec(const std::string& sql);
  // Schema upgrade of a loom.db written before `column` existed.
  absl::Status AddColumnIfMissing(const std::string& table, const std::string& column, const std::string& type);
  absl::Status AppendEventLocked(int64_t job_id, v1::JobState state, const std::string& message);

  std::mutex mu_;
  sqlite3* db_;
  std::string path_;
  std::string data_dir_;
  std::unique_ptr<DataDirLock> lock_;
  IdMarker marker_;
  int64_t id_block_ = 1000;
};

}  // namespace loom::runtime::service::store
