#include "runtime/service/store/job_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace loom::runtime::service::store {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status SqlError(sqlite3* db, absl::string_view what) {
  return absl::InternalError(absl::StrCat("job store: ", what, ": ", sqlite3_errmsg(db)));
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  absl::Status status() const { return rc_ == SQLITE_OK ? absl::OkStatus() : SqlError(db_, "prepare"); }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(s_); }
  absl::Status Run() {
    int rc = Step();
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? absl::OkStatus() : SqlError(db_, "step");
  }
  int64_t Int(int c) { return sqlite3_column_int64(s_, c); }
  std::string Text(int c) {
    const void* p = sqlite3_column_blob(s_, c);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(s_, c)) : std::string();
  }
  sqlite3_stmt* get() { return s_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

// Rolls back unless Commit() succeeded.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) {}
  absl::Status Begin() {
    return sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK
               ? (active_ = true, absl::OkStatus())
               : SqlError(db_, "begin");
  }
  absl::Status Commit() {
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return SqlError(db_, "commit");
    active_ = false;
    return absl::OkStatus();
  }
  ~Txn() {
    if (active_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }

 private:
  sqlite3* db_;
  bool active_ = false;
};

// Writes of advisory fields (progress, wait reasons) commit without an fsync:
// synchronous=NORMAL for the scope (set outside any transaction, as SQLite
// requires), FULL again after it. In WAL mode a later FULL commit syncs the
// earlier frames with its own.
class DeferredSync {
 public:
  explicit DeferredSync(sqlite3* db) : db_(db) {
    ok_ = sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~DeferredSync() { sqlite3_exec(db_, "PRAGMA synchronous=FULL", nullptr, nullptr, nullptr); }
  absl::Status status() const { return ok_ ? absl::OkStatus() : SqlError(db_, "synchronous=NORMAL"); }

 private:
  sqlite3* db_;
  bool ok_ = false;
};

constexpr char kSchema[] = R"SQL(
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  idempotency_key TEXT UNIQUE,
  name TEXT NOT NULL,
  spec BLOB NOT NULL,
  state INTEGER NOT NULL,
  priority INTEGER NOT NULL,
  world_size INTEGER NOT NULL,
  submit_ms INTEGER NOT NULL,
  update_ms INTEGER NOT NULL,
  restart_count INTEGER NOT NULL DEFAULT 0,
  exit_codes TEXT NOT NULL DEFAULT '',
  root_cause_rank INTEGER NOT NULL DEFAULT -1,
  root_cause TEXT NOT NULL DEFAULT '',
  last_checkpoint_step INTEGER NOT NULL DEFAULT -1,
  current_step INTEGER NOT NULL DEFAULT 0,
  wait_reason TEXT NOT NULL DEFAULT '',
  submitter TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, id);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  time_ms INTEGER NOT NULL,
  state INTEGER NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_job ON events(job_id, id);
CREATE TABLE IF NOT EXISTS logs (
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  rank INTEGER NOT NULL,
  stream TEXT NOT NULL,
  path TEXT NOT NULL,
  PRIMARY KEY (job_id, rank, stream)
);
CREATE TABLE IF NOT EXISTS placement_refs (
  job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
  ref TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS agents (
  num INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT UNIQUE NOT NULL,
  hostname TEXT NOT NULL,
  secret_sha256 TEXT NOT NULL,
  cert_identity TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS agents_never_deleted BEFORE DELETE ON agents
  BEGIN SELECT RAISE(ABORT, 'agent identities are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS jobs_terminal_is_final BEFORE UPDATE ON jobs
  WHEN OLD.state IN (5, 6, 7)
  BEGIN SELECT RAISE(ABORT, 'job is in a terminal state'); END;
CREATE TRIGGER IF NOT EXISTS jobs_never_deleted BEFORE DELETE ON jobs
  BEGIN SELECT RAISE(ABORT, 'jobs are never deleted'); END;
)SQL";

constexpr char kColumns[] =
    "id, idempotency_key, name, spec, state, priority, world_size, submit_ms, update_ms, restart_count, "
    "exit_codes, root_cause_rank, root_cause, last_checkpoint_step, current_step, wait_reason, submitter";

JobRecord ReadRow(Stmt& s) {
  JobRecord j;
  j.id = s.Int(0);
  j.idempotency_key = s.Text(1);
  j.name = s.Text(2);
  j.spec = s.Text(3);
  j.state = static_cast<v1::JobState>(s.Int(4));
  j.priority = static_cast<int32_t>(s.Int(5));
  j.world_size = static_cast<int32_t>(s.Int(6));
  j.submit_ms = s.Int(7);
  j.update_ms = s.Int(8);
  j.restart_count = static_cast<int32_t>(s.Int(9));
  for (absl::string_view p : absl::StrSplit(s.Text(10), ',', absl::SkipEmpty())) {
    int32_t v = 0;
    if (absl::SimpleAtoi(p, &v)) j.exit_codes.push_back(v);
  }
  j.root_cause_rank = static_cast<int32_t>(s.Int(11));
  j.root_cause = s.Text(12);
  j.last_checkpoint_step = s.Int(13);
  j.current_step = s.Int(14);
  j.wait_reason = s.Text(15);
  j.submitter = s.Text(16);
  return j;
}

const char* const kIdKinds[] = {"jobs", "agents"};

// Whether loom.db is missing or empty, and, for a folder that held a store
// before, whether that may be started over (options.init).
absl::Status CheckStoreFile(const std::string& data_dir, const std::string& path, bool had_store,
                            const StoreOptions& options) {
  struct stat sb;
  const bool exists = ::stat(path.c_str(), &sb) == 0;
  if (exists && sb.st_size > 0) return absl::OkStatus();
  if (!had_store) return absl::OkStatus();  // a new folder
  if (!options.init) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data_dir: ", path, exists ? " is empty" : " is missing", ", but ", data_dir, "/", kMarkerFile,
        " says this folder held a job store: restore loom.db from a backup, or start with --init for an empty "
        "store (job and agent ids continue after the old ones)"));
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  return absl::OkStatus();
}

std::string HostPart(const std::string& hostname) {
  std::string out;
  for (char c : hostname) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.' || l == '-') out += l;
    if (out.size() == 32) break;
  }
  return out;
}

}  // namespace

bool IsTerminal(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

bool IsAllowedTransition(v1::JobState from, v1::JobState to) {
  if (from == to) return true;
  if (IsTerminal(from)) return false;
  if (to == v1::FAILED || to == v1::CANCELLED) return true;  // from any live state
  switch (from) {
    case v1::PENDING: return to == v1::SCHEDULED;
    // PENDING: placement lost before launch; RESTARTING: a rank died early.
    case v1::SCHEDULED: return to == v1::RUNNING || to == v1::PENDING || to == v1::RESTARTING;
    case v1::RUNNING: return to == v1::RESTARTING || to == v1::SUCCEEDED;
    case v1::RESTARTING: return to == v1::RUNNING || to == v1::SCHEDULED || to == v1::PENDING;
    default: return false;
  }
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& data_dir,
                                                        const StoreOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("data_dir: cannot create '", data_dir, "': ", ec.message()));
  ::chmod(data_dir.c_str(), 0700);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DataDirLock> lock, DataDirLock::Acquire(data_dir));
  LOOM_ASSIGN_OR_RETURN(std::optional<IdMarker> marker, IdMarker::Read(data_dir));
  std::string path = data_dir + "/loom.db";
  LOOM_RETURN_IF_ERROR(CheckStoreFile(data_dir, path, marker.has_value(), options));
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = absl::UnavailableError(absl::StrCat("job store: cannot open ", path, ": ",
                                                         db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<JobStore> store(new JobStore(db, path));
  store->data_dir_ = data_dir;
  store->lock_ = std::move(lock);
  store->id_block_ = std::max<int64_t>(1, options.id_block);
  sqlite3_busy_timeout(db, 5000);
  {
    Stmt s(db, "PRAGMA journal_mode=WAL");
    LOOM_RETURN_IF_ERROR(s.status());
    if (s.Step() != SQLITE_ROW || s.Text(0) != "wal") {
      return absl::InternalError(absl::StrCat("job store: ", path, ": cannot enable WAL journal"));
    }
  }
  LOOM_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  LOOM_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));
  LOOM_RETURN_IF_ERROR(store->Exec(kSchema));
  LOOM_RETURN_IF_ERROR(store->AddColumnIfMissing("jobs", "submitter", "TEXT NOT NULL DEFAULT ''"));
  store->marker_ = marker.value_or(IdMarker());
  std::lock_guard<std::mutex> l(store->mu_);
  for (const char* kind : kIdKinds) LOOM_RETURN_IF_ERROR(store->ApplyIdFloorLocked(kind));
  if (!marker.has_value()) LOOM_RETURN_IF_ERROR(store->marker_.Write(data_dir));
  return store;
}

// The marker's reservation is also kept in loom.db (`meta`), written in the
// transaction that commits the id that needed it. A loom.db whose copy is
// below the marker's is older than the marker (recreated with --init): ids up
// to the marker's reservation may have been handed out, so its sequence
// starts past them.
absl::Status JobStore::ApplyIdFloorLocked(const std::string& kind) {
  int64_t seq = 0, db_reserved = 0;
  {
    Stmt q(db_, "SELECT seq FROM sqlite_sequence WHERE name = ?");
    LOOM_RETURN_IF_ERROR(q.status());
    q.Bind(1, kind);
    if (q.Step() == SQLITE_ROW) seq = q.Int(0);
    Stmt m(db_, "SELECT value FROM meta WHERE key = ?");
    LOOM_RETURN_IF_ERROR(m.status());
    m.Bind(1, "reserved." + kind);
    if (m.Step() == SQLITE_ROW) db_reserved = m.Int(0);
  }
  const int64_t marked = marker_.Get(kind);
  if (db_reserved < marked && seq < marked) {
    Stmt del(db_, "DELETE FROM sqlite_sequence WHERE name = ?");
    LOOM_RETURN_IF_ERROR(del.status());
    LOOM_RETURN_IF_ERROR(del.Bind(1, kind).Run());
    Stmt ins(db_, "INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)");
    LOOM_RETURN_IF_ERROR(ins.status());
    LOOM_RETURN_IF_ERROR(ins.Bind(1, kind).Bind(2, marked).Run());
  }
  const int64_t high = std::max({seq, db_reserved, marked});
  if (high > marked) {  // a marker older than its store (or none): the store's ids count
    marker_.reserved[kind] = high;
    LOOM_RETURN_IF_ERROR(marker_.Write(data_dir_));
  }
  if (high > db_reserved) LOOM_RETURN_IF_ERROR(SetReservedLocked(kind, high));
  return absl::OkStatus();
}

absl::Status JobStore::SetReservedLocked(const std::string& kind, int64_t reserved) {
  Stmt s(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
  LOOM_RETURN_IF_ERROR(s.status());
  return s.Bind(1, "reserved." + kind).Bind(2, reserved).Run();
}

absl::Status JobStore::ReserveLocked(const std::string& kind, int64_t id) {
  if (id <= marker_.Get(kind)) return absl::OkStatus();
  IdMarker next = marker_;
  next.reserved[kind] = id + id_block_ - 1;
  LOOM_RETURN_IF_ERROR(Annotate(next.Write(data_dir_), "job store: reserving ids"));
  marker_ = std::move(next);
  return SetReservedLocked(kind, marker_.Get(kind));
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status s = absl::InternalError(absl::StrCat("job store: ", err ? err : "error"));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

absl::Status JobStore::ExecRaw(const std::string& sql) {
  std::lock_guard<std::mutex> l(mu_);
  return Exec(sql);
}

absl::Status JobStore::AppendEventLocked(int64_t job_id, v1::JobState state, const std::string& message) {
  Stmt s(db_, "INSERT INTO events(job_id, time_ms, state, message) VALUES (?, ?, ?, ?)");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, job_id).Bind(2, NowMs()).Bind(3, static_cast<int64_t>(state)).Bind(4, message);
  return s.Run();
}

absl::StatusOr<JobRecord> JobStore::GetLocked(int64_t id) {
  Stmt s(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE id = ?"));
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, id);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  if (rc != SQLITE_ROW) return SqlError(db_, "get job");
  return ReadRow(s);
}

absl::StatusOr<JobStore::InsertResult> JobStore::InsertJob(const NewJob& job) {
  std::lock_guard<std::mutex> l(mu_);
  Txn txn(db_);
  LOOM_RETURN_IF_ERROR(txn.Begin());
  if (!job.idempotency_key.empty()) {
    Stmt q(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE idempotency_key = ?"));
    LOOM_RETURN_IF_ERROR(q.status());
    q.Bind(1, job.idempotency_key);
    int rc = q.Step();
    if (rc == SQLITE_ROW) {
      JobRecord old = ReadRow(q);
      if (old.spec != job.spec) {
        return absl::FailedPreconditionError(absl::StrCat("idempotency_key: '", job.idempotency_key,
                                                          "' was used for job-", old.id, " with a different spec"));
      }
      return InsertResult{std::move(old), true};
    }
    if (rc != SQLITE_DONE) return SqlError(db_, "lookup key");
  }
  int64_t now = NowMs();
  Stmt s(db_,
         "INSERT INTO jobs(idempotency_key, name, spec, state, priority, world_size, submit_ms, update_ms, submitter) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  LOOM_RETURN_IF_ERROR(s.status());
  if (job.idempotency_key.empty()) {
    s.BindNull(1);
  } else {
    s.Bind(1, job.idempotency_key);
  }
  s.Bind(2, job.name).BindBlob(3, job.spec).Bind(4, static_cast<int64_t>(v1::PENDING));
  s.Bind(5, static_cast<int64_t>(job.priority)).Bind(6, static_cast<int64_t>(job.world_size)).Bind(7, now).Bind(8, now);
  s.Bind(9, job.submitter);
  LOOM_RETURN_IF_ERROR(s.Run());
  int64_t id = sqlite3_last_insert_rowid(db_);
  LOOM_RETURN_IF_ERROR(ReserveLocked("jobs", id));
  LOOM_RETURN_IF_ERROR(AppendEventLocked(id, v1::PENDING, "submitted"));
  LOOM_ASSIGN_OR_RETURN(JobRecord rec, GetLocked(id));
  LOOM_RETURN_IF_ERROR(txn.Commit());
  return InsertResult{std::move(rec), false};
}

absl::StatusOr<JobRecord> JobStore::GetJob(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  return GetLocked(id);
}

absl::StatusOr<JobRecord> JobStore::FindByKey(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE idempotency_key = ?"));
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, key);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no job with idempotency key '", key, "'"));
  if (rc != SQLITE_ROW) return SqlError(db_, "find by key");
  return ReadRow(s);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::QueryLocked(const std::string& sql,
                                                             const std::function<absl::Status(void*)>& bind) {
  Stmt s(db_, sql);
  LOOM_RETURN_IF_ERROR(s.status());
  LOOM_RETURN_IF_ERROR(bind(&s));
  std::vector<JobRecord> out;
  for (;;) {
    int rc = s.Step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return SqlError(db_, "list jobs");
    out.push_back(ReadRow(s));
  }
  return out;
}

namespace {

// The WHERE clause of a ListQuery (states and name prefix; the prefix binds ?2).
std::string ListFilter(const ListQuery& q) {
  std::string sql;
  if (!q.states.empty()) {
    std::vector<std::string> st;
    for (v1::JobState s : q.states) st.push_back(absl::StrCat(static_cast<int>(s)));
    absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(st, ","), ")");
  }
  if (!q.name_prefix.empty()) absl::StrAppend(&sql, " AND substr(name, 1, length(?2)) = ?2");
  return sql;
}

}  // namespace

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobs(const ListQuery& q) {
  std::string sql = absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE ");
  if (q.newest_first) {
    absl::StrAppend(&sql, q.after_id > 0 ? "id < ?1" : "?1 = 0", ListFilter(q), " ORDER BY id DESC");
  } else {
    absl::StrAppend(&sql, "id > ?1", ListFilter(q), " ORDER BY id");
  }
  absl::StrAppend(&sql, " LIMIT ", q.limit);
  std::lock_guard<std::mutex> l(mu_);
  return QueryLocked(sql, [&](void* p) {
    Stmt& s = *static_cast<Stmt*>(p);
    s.Bind(1, q.after_id);
    if (!q.name_prefix.empty()) s.Bind(2, q.name_prefix);
    return absl::OkStatus();
  });
}

absl::StatusOr<int64_t> JobStore::CountJobs(const ListQuery& q) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, absl::StrCat("SELECT COUNT(*) FROM jobs WHERE ?1 = ?1", ListFilter(q)));
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, int64_t{0});
  if (!q.name_prefix.empty()) s.Bind(2, q.name_prefix);
  if (s.Step() != SQLITE_ROW) return SqlError(db_, "count jobs");
  return s.Int(0);
}

absl::Status JobStore::AddColumnIfMissing(const std::string& table, const std::string& column,
                                          const std::string& type) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt info(db_, absl::StrCat("PRAGMA table_info(", table, ")"));
  LOOM_RETURN_IF_ERROR(info.status());
  for (int rc = info.Step(); rc == SQLITE_ROW; rc = info.Step()) {
    if (info.Text(1) == column) return absl::OkStatus();
  }
  return Exec(absl::StrCat("ALTER TABLE ", table, " ADD COLUMN ", column, " ", type));
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ActiveJobs() {
  std::lock_guard<std::mutex> l(mu_);
  return QueryLocked(absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE state NOT IN (5, 6, 7) ORDER BY id"),
                     [](void*) { return absl::OkStatus(); });
}

absl::StatusOr<JobRecord> JobStore::Update(int64_t id, const std::function<void(JobRecord&)>& fn,
                                           const std::string& message) {
  std::lock_guard<std::mutex> l(mu_);
  Txn txn(db_);
  LOOM_RETURN_IF_ERROR(txn.Begin());
  LOOM_ASSIGN_OR_RETURN(JobRecord old, GetLocked(id));
  if (IsTerminal(old.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job-", id, " is ", v1::JobState_Name(old.state), " (terminal) and cannot change"));
  }
  JobRecord j = old;
  fn(j);
  if (!v1::JobState_IsValid(j.state) || j.state == v1::JOB_STATE_UNSPECIFIED ||
      !IsAllowedTransition(old.state, j.state)) {
    return absl::FailedPreconditionError(absl::StrCat("job-", id, ": transition ", v1::JobState_Name(old.state),
                                                      " -> ", v1::JobState_Name(j.state), " is not allowed"));
  }
  j.update_ms = NowMs();
  Stmt s(db_,
         "UPDATE jobs SET state = ?, priority = ?, world_size = ?, update_ms = ?, restart_count = ?, "
         "exit_codes = ?, root_cause_rank = ?, root_cause = ?, last_checkpoint_step = ?, current_step = ?, "
         "wait_reason = ? WHERE id = ?");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, static_cast<int64_t>(j.state)).Bind(2, static_cast<int64_t>(j.priority));
  s.Bind(3, static_cast<int64_t>(j.world_size)).Bind(4, j.update_ms).Bind(5, static_cast<int64_t>(j.restart_count));
  s.Bind(6, absl::StrJoin(j.exit_codes, ",")).Bind(7, static_cast<int64_t>(j.root_cause_rank));
  s.Bind(8, j.root_cause).Bind(9, j.last_checkpoint_step).Bind(10, j.current_step).Bind(11, j.wait_reason);
  s.Bind(12, id);
  LOOM_RETURN_IF_ERROR(s.Run());
  if (j.state != old.state) {
    LOOM_RETURN_IF_ERROR(AppendEventLocked(id, j.state, message.empty() ? v1::JobState_Name(j.state) : message));
  }
  LOOM_RETURN_IF_ERROR(txn.Commit());
  JobRecord out = old;  // keep the submission fields exactly as stored
  out.state = j.state;
  out.priority = j.priority;
  out.world_size = j.world_size;
  out.update_ms = j.update_ms;
  out.restart_count = j.restart_count;
  out.exit_codes = j.exit_codes;
  out.root_cause_rank = j.root_cause_rank;
  out.root_cause = j.root_cause;
  out.last_checkpoint_step = j.last_checkpoint_step;
  out.current_step = j.current_step;
  out.wait_reason = j.wait_reason;
  return out;
}

absl::Status JobStore::UpdateProgress(int64_t id, int64_t step, int64_t checkpoint_step) {
  std::lock_guard<std::mutex> l(mu_);
  DeferredSync deferred(db_);
  LOOM_RETURN_IF_ERROR(deferred.status());
  Stmt s(db_,
         "UPDATE jobs SET current_step = MAX(current_step, ?), last_checkpoint_step = MAX(last_checkpoint_step, ?), "
         "update_ms = ? WHERE id = ? AND state NOT IN (5, 6, 7) AND (current_step < ? OR last_checkpoint_step < ?)");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, step).Bind(2, checkpoint_step).Bind(3, NowMs()).Bind(4, id).Bind(5, step).Bind(6, checkpoint_step);
  return s.Run();
}

absl::Status JobStore::SetWaitReasons(const std::vector<std::pair<int64_t, std::string>>& reasons) {
  if (reasons.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  DeferredSync deferred(db_);
  LOOM_RETURN_IF_ERROR(deferred.status());
  Txn txn(db_);
  LOOM_RETURN_IF_ERROR(txn.Begin());
  int64_t now = NowMs();
  for (const auto& [id, why] : reasons) {
    Stmt s(db_, "UPDATE jobs SET wait_reason = ?, update_ms = ? WHERE id = ? AND state NOT IN (5, 6, 7)");
    LOOM_RETURN_IF_ERROR(s.status());
    s.Bind(1, why).Bind(2, now).Bind(3, id);
    LOOM_RETURN_IF_ERROR(s.Run());
  }
  return txn.Commit();
}

absl::Status JobStore::AppendEvent(int64_t job_id, const std::string& message) {
  std::lock_guard<std::mutex> l(mu_);
  Txn txn(db_);
  LOOM_RETURN_IF_ERROR(txn.Begin());
  LOOM_ASSIGN_OR_RETURN(JobRecord j, GetLocked(job_id));
  LOOM_RETURN_IF_ERROR(AppendEventLocked(job_id, j.state, message));
  return txn.Commit();
}

absl::StatusOr<std::vector<JobEventRecord>> JobStore::Events(int64_t job_id, int64_t after_event_id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT id, job_id, time_ms, state, message FROM events WHERE job_id = ? AND id > ? ORDER BY id");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, job_id).Bind(2, after_event_id);
  std::vector<JobEventRecord> out;
  for (int rc; (rc = s.Step()) != SQLITE_DONE;) {
    if (rc != SQLITE_ROW) return SqlError(db_, "events");
    out.push_back({s.Int(0), s.Int(1), s.Int(2), static_cast<v1::JobState>(s.Int(3)), s.Text(4)});
  }
  return out;
}

absl::StatusOr<AgentRecord> JobStore::InsertAgent(const std::string& hostname, const std::string& secret_sha256,
                                                  const std::string& cert_identity) {
  std::lock_guard<std::mutex> l(mu_);
  Txn txn(db_);
  LOOM_RETURN_IF_ERROR(txn.Begin());
  int64_t num = 1;
  {
    Stmt q(db_, "SELECT seq FROM sqlite_sequence WHERE name = 'agents'");
    LOOM_RETURN_IF_ERROR(q.status());
    if (q.Step() == SQLITE_ROW) num = q.Int(0) + 1;
  }
  LOOM_RETURN_IF_ERROR(ReserveLocked("agents", num));
  AgentRecord a;
  const std::string host = HostPart(hostname);
  a.id = absl::StrCat("agent-", num, host.empty() ? "" : "-", host);
  a.hostname = hostname;
  a.secret_sha256 = secret_sha256;
  a.cert_identity = cert_identity;
  a.created_ms = NowMs();
  Stmt s(db_,
         "INSERT INTO agents(num, id, hostname, secret_sha256, cert_identity, created_ms) VALUES (?, ?, ?, ?, ?, ?)");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, num).Bind(2, a.id).Bind(3, a.hostname).Bind(4, a.secret_sha256).Bind(5, a.cert_identity);
  LOOM_RETURN_IF_ERROR(s.Bind(6, a.created_ms).Run());
  LOOM_RETURN_IF_ERROR(txn.Commit());
  return a;
}

absl::StatusOr<std::vector<AgentRecord>> JobStore::Agents() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT id, hostname, secret_sha256, cert_identity, created_ms FROM agents ORDER BY num");
  LOOM_RETURN_IF_ERROR(s.status());
  std::vector<AgentRecord> out;
  for (int rc; (rc = s.Step()) != SQLITE_DONE;) {
    if (rc != SQLITE_ROW) return SqlError(db_, "agents");
    out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4)});
  }
  return out;
}

absl::Status JobStore::AddLog(const LogRecord& log) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO logs(job_id, rank, stream, path) VALUES (?, ?, ?, ?)");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, log.job_id).Bind(2, static_cast<int64_t>(log.rank)).Bind(3, log.stream).Bind(4, log.path);
  return s.Run();
}

absl::StatusOr<std::vector<LogRecord>> JobStore::Logs(int64_t job_id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT job_id, rank, stream, path FROM logs WHERE job_id = ? ORDER BY rank, stream");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, job_id);
  std::vector<LogRecord> out;
  for (int rc; (rc = s.Step()) != SQLITE_DONE;) {
    if (rc != SQLITE_ROW) return SqlError(db_, "logs");
    out.push_back({s.Int(0), static_cast<int32_t>(s.Int(1)), s.Text(2), s.Text(3)});
  }
  return out;
}

absl::Status JobStore::SetPlacementRef(int64_t job_id, const std::string& ref) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO placement_refs(job_id, ref) VALUES (?, ?)");
  LOOM_RETURN_IF_ERROR(s.status());
  s.Bind(1, job_id).Bind(2, ref);
  return s.Run();
}

absl::StatusOr<std::map<int64_t, std::string>> JobStore::PlacementRefs() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT job_id, ref FROM placement_refs");
  LOOM_RETURN_IF_ERROR(s.status());
  std::map<int64_t, std::string> out;
  for (int rc; (rc = s.Step()) != SQLITE_DONE;) {
    if (rc != SQLITE_ROW) return SqlError(db_, "placement_refs");
    out[s.Int(0)] = s.Text(1);
  }
  return out;
}

absl::StatusOr<std::map<v1::JobState, int64_t>> JobStore::CountByState() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state");
  LOOM_RETURN_IF_ERROR(s.status());
  std::map<v1::JobState, int64_t> out;
  for (int rc; (rc = s.Step()) != SQLITE_DONE;) {
    if (rc != SQLITE_ROW) return SqlError(db_, "count");
    out[static_cast<v1::JobState>(s.Int(0))] = s.Int(1);
  }
  return out;
}

absl::StatusOr<std::string> JobStore::IntegrityCheck() { return Pragma("integrity_check"); }

absl::StatusOr<std::string> JobStore::Pragma(const std::string& name) {
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || c == '_')) return absl::InvalidArgumentError("pragma: bad name");
  }
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(db_, "PRAGMA " + name);
  LOOM_RETURN_IF_ERROR(s.status());
  std::string out;
  for (int rc; (rc = s.Step()) != SQLITE_DONE;) {
    if (rc != SQLITE_ROW) return SqlError(db_, "integrity_check");
    if (!out.empty()) out += "\n";
    out += s.Text(0);
  }
  return out;
}

}  // namespace loom::runtime::service::store
