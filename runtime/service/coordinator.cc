#include "runtime/service/coordinator.h"
#include "runtime/service/auth/token.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/echo.h"
#include "base/status.h"
#include "parallel/planner.h"
#include "runtime/jobspec/confine.h"
#include "runtime/jobspec/jobspec.h"

namespace loom::runtime::service {
namespace {

constexpr int kMaxPageSize = 1000;
constexpr int kDefaultPageSize = 50;
constexpr size_t kMaxKeyLength = 256;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The folders spec paths are confined to (CoordinatorOptions); creates run_root.
absl::StatusOr<std::vector<std::string>> ConfinementRoots(const CoordinatorOptions& o) {
  std::vector<std::string> roots = o.allowed_roots;
  if (roots.empty()) {
    if (!o.run_root.empty()) roots.push_back(o.run_root);
    roots.insert(roots.end(), o.data_roots.begin(), o.data_roots.end());
  }
  for (const std::string& r : roots) {
    if (r.empty() || r.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("allowed_roots: '", r, "' must be a non-empty path without ':'"));
    }
  }
  if (!o.run_root.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.run_root, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("run_root: cannot create '", o.run_root, "': ", ec.message()));
    }
    LOOM_RETURN_IF_ERROR(jobspec::ConfinePath("run_root", o.run_root, roots));
  }
  return roots;
}

// The spec is validated: dp x tp is at most jobspec::kMaxRanks.
Demand DemandOf(const v1::JobSpec& spec) {
  const int64_t ranks = int64_t{spec.parallel().dp()} * std::max(1, spec.parallel().tp());
  return Demand{static_cast<int32_t>(std::min<int64_t>(ranks, jobspec::kMaxRanks)), spec.device() == "cuda",
                parallel::BytesPerRank(spec), std::max(1, spec.resources().ranks_per_gpu())};
}

constexpr int64_t kMiB = int64_t{1} << 20;

}  // namespace

// The built-in backend: the Scheduler gang-places ranks onto registered
// agents, and launch/kill orders go out through NodeService. Called under the
// coordinator's lock, with its private state.
class AgentPlacement final : public placement::Placement {
 public:
  explicit AgentPlacement(Coordinator* c) : c_(c) {}
  std::string name() const override { return "agents"; }
  absl::Status Start(placement::Sink*) override { return absl::OkStatus(); }
  void Stop() override {}

  // A job that can never fit is refused: one rank needs more memory than the
  // largest agent has (every agent reports its memory), or (unless it asks
  // to wait for capacity) it has more ranks than the agents that hold them.
  absl::Status Admissible(const placement::Job& job, bool wait_for_capacity) override {
    const Demand demand = DemandOf(job.spec);
    const Scheduler& sched = c_->sched_;
    const int64_t largest = sched.LargestAgentMemory();
    if (demand.bytes_per_rank > 0 && largest > 0 && sched.TotalCapacity(demand) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job needs about ", (demand.bytes_per_rank + kMiB - 1) / kMiB,
          " MiB per rank (the planner's estimate for this model, batch and layout) but the largest agent has ",
          largest / kMiB, " MiB; a smaller model or batch, more dp or tp, or ZeRO lowers it"));
    }
    if (!wait_for_capacity && !sched.FitsCluster(demand)) {
      if (demand.gpu && demand.ranks_per_gpu > 1)
        return absl::FailedPreconditionError(absl::StrCat(
            "job needs ", (demand.ranks + demand.ranks_per_gpu - 1) / demand.ranks_per_gpu, " GPUs (", demand.ranks,
            " ranks, resources.ranks_per_gpu = ", demand.ranks_per_gpu, ") but all ", sched.num_agents(),
            " registered agent(s) together have ", sched.TotalCapacity(true), "; set wait_for_capacity to queue it anyway"));
      return absl::FailedPreconditionError(absl::StrCat(
          "job needs ", demand.ranks, demand.gpu ? " GPUs" : " CPU slots", " but all ", sched.num_agents(),
          " registered agent(s) together have ", sched.TotalCapacity(demand.gpu),
          sched.TotalCapacity(demand) < sched.TotalCapacity(demand.gpu)
              ? absl::StrCat(" (", sched.TotalCapacity(demand), " on agents with the ",
                             (demand.bytes_per_rank + kMiB - 1) / kMiB, " MiB a rank needs)")
              : "",
          "; set wait_for_capacity to queue it anyway"));
    }
    return absl::OkStatus();
  }
  void Admit(const placement::Job& job) override {
    c_->sched_.Enqueue(job.id, job.priority, job.id, DemandOf(job.spec));
    c_->RunScheduleLocked();
  }
  // Queued jobs go back in the queue; jobs that were placed keep their state
  // until agents reconnect and reclaim their ranks (CheckAgents).
  void Resume(const placement::Job& job, const std::string&) override {
    if (job.state == v1::PENDING) {
      c_->sched_.Enqueue(job.id, job.priority, job.id, DemandOf(job.spec));
    } else {
      c_->unclaimed_.insert(job.id);
    }
  }
  void Cancel(int64_t id) override {
    c_->sched_.Dequeue(id);
    if (const auto* slots = c_->sched_.Placement(id)) c_->KillLocked(id, *slots);
    c_->sched_.Release(id);
    c_->RunScheduleLocked();
  }

 private:
  Coordinator* c_;
};

bool IsRetryableExit(int code) { return code != kExitConfigError && code != 126 && code != 127; }

std::string FormatJobId(int64_t id) { return absl::StrCat("job-", id); }

absl::StatusOr<int64_t> ParseJobId(const std::string& s) {
  int64_t id = 0;
  if (s.rfind("job-", 0) != 0 || !absl::SimpleAtoi(s.substr(4), &id) || id <= 0 ||
      s.find_first_not_of("0123456789", 4) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("job_id: expected job-<number>, got '", s.substr(0, 64), "'"));
  }
  return id;
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(const CoordinatorOptions& options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data_dir: required");
  if (options.heartbeat_interval_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat_interval_ms: must be positive, got ", options.heartbeat_interval_ms));
  }
  store::StoreOptions so;
  so.init = options.init;
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> roots, ConfinementRoots(options));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<store::JobStore> store, store::JobStore::Open(options.data_dir, so));
  std::unique_ptr<Coordinator> c(new Coordinator(options, std::move(store)));
  c->roots_ = std::move(roots);
  LOOM_ASSIGN_OR_RETURN(c->incarnation_, auth::RandomHex(8));
  LOOM_ASSIGN_OR_RETURN(std::vector<store::AgentRecord> agents, c->store_->Agents());
  for (const store::AgentRecord& a : agents) c->credentials_[a.id] = {a.secret_sha256, a.cert_identity};
  if (options.make_placement) {
    LOOM_ASSIGN_OR_RETURN(c->placement_, options.make_placement());
  } else {
    c->placement_ = std::make_unique<AgentPlacement>(c.get());
  }
  // Reload: every unfinished job goes back to its backend, with the handle
  // the backend gave it (the Slurm job id).
  LOOM_ASSIGN_OR_RETURN(std::vector<store::JobRecord> active, c->store_->ActiveJobs());
  LOOM_ASSIGN_OR_RETURN(auto refs, c->store_->PlacementRefs());
  std::unique_lock<std::mutex> l(c->mu_);
  for (const store::JobRecord& r : active) {
    v1::JobSpec spec;
    spec.ParseFromString(r.spec);
    LiveJob& live = c->live_[r.id];
    live.demand = DemandOf(spec);
    live.last_wait_reason = r.wait_reason;
    c->placement_->Resume(c->JobFor(r, spec), refs[r.id]);
  }
  c->UpdateGaugesLocked();
  l.unlock();
  LOOM_RETURN_IF_ERROR(c->placement_->Start(c.get()));
  l.lock();
  Coordinator* raw = c.get();
  c->monitor_ = std::thread([raw] {
    std::unique_lock<std::mutex> l(raw->mu_);
    while (!raw->stopping_) {
      raw->cv_.wait_for(l, std::chrono::milliseconds(raw->opts_.heartbeat_interval_ms));
      if (raw->stopping_) break;
      l.unlock();
      raw->CheckAgents();
      l.lock();
    }
  });
  return c;
}

void Coordinator::StartReclaimClock() {
  std::lock_guard<std::mutex> l(mu_);
  reclaim_deadline_ = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(std::max(3 * opts_.heartbeat_interval_ms, opts_.reclaim_grace_ms));
}

Coordinator::Coordinator(const CoordinatorOptions& o, std::unique_ptr<store::JobStore> s)
    : opts_(o), store_(std::move(s)) {
  if (auto* m = opts_.metrics) {
    m_jobs_ = m->AddGauge("loom_jobs", "Jobs by state.", {"state"});
    m_queue_ = m->AddGauge("loom_queue_length", "Jobs waiting in the scheduling queue.");
    m_agents_ = m->AddGauge("loom_agents_alive", "Registered agents with a recent heartbeat.");
    m_submitted_ = m->AddCounter("loom_jobs_submitted_total", "Job submissions by result.", {"result"});
    m_restarts_ = m->AddCounter("loom_job_restarts_total", "Group restarts of jobs.");
    m_steps_ = m->AddCounter("loom_job_steps_total",
                             "Training steps completed, summed over jobs (each job's step as its rank 0 reports it).");
    m_sched_latency_ = m->AddHistogram("loom_scheduling_latency_seconds", "Time from submission to placement.",
                                       {}, metrics::DefaultBuckets());
    m_refused_ = m->AddCounter("loom_node_calls_refused_total",
                               "NodeService calls refused for acting for another agent's ranks or id.", {"call"});
  }
}

Coordinator::~Coordinator() {
  Stop();
  if (placement_) placement_->Stop();
  if (monitor_.joinable()) monitor_.join();
}

void Coordinator::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  stopping_ = true;
  cv_.notify_all();
}

bool Coordinator::stopping() {
  std::lock_guard<std::mutex> l(mu_);
  return stopping_;
}

// The coordinator's part of validating a spec (the one shared validator is
// jobspec::ValidateJobSpec): the job name is a folder name, and every path is
// confined before the spec's own checks look at the files it names.
absl::Status Coordinator::ValidateSpec(v1::JobSpec& spec) const {
  jobspec::ApplyDefaults(spec);
  if (absl::Status s = jobspec::ValidateStringSizes(spec); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("spec.", s.message()));
  LOOM_RETURN_IF_ERROR(jobspec::ValidateJobName("spec.name", spec.name()));
  LOOM_RETURN_IF_ERROR(jobspec::ConfineSpecPaths("spec.", spec, roots_));
  absl::Status s = jobspec::ValidateJobSpec(spec);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("spec.", s.message()));
  if (opts_.check_model) {
    absl::Status m = opts_.check_model(spec);
    if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat("spec.", m.message()));
  }
  return absl::OkStatus();
}

std::string Coordinator::RunDirFor(int64_t id, const v1::JobSpec& spec) const {
  if (!spec.run_dir().empty() || opts_.run_root.empty()) return spec.run_dir();
  return absl::StrCat(opts_.run_root, "/", spec.name(), "-", FormatJobId(id));
}

placement::Job Coordinator::JobFor(const store::JobRecord& r, const v1::JobSpec& spec) const {
  placement::Job j;
  j.id = r.id;
  j.job_id = FormatJobId(r.id);
  j.spec = spec;
  j.world_size = r.world_size > 0 ? r.world_size : DemandOf(spec).ranks;
  j.priority = r.id > 0 ? r.priority : spec.priority();
  j.state = r.state;
  j.restart_count = r.restart_count;
  j.run_dir = r.id > 0 ? RunDirFor(r.id, spec) : "";
  return j;
}

v1::JobStatus Coordinator::ToStatus(const store::JobRecord& r) const {
  v1::JobStatus s;
  s.set_job_id(FormatJobId(r.id));
  s.set_name(r.name);
  s.set_state(r.state);
  s.set_priority(r.priority);
  s.set_submit_time_unix_ms(r.submit_ms);
  s.set_update_time_unix_ms(r.update_ms);
  s.set_world_size(r.world_size);
  s.set_restart_count(r.restart_count);
  for (int32_t c : r.exit_codes) s.add_exit_codes(c);
  s.set_root_cause_rank(r.root_cause_rank);
  s.set_root_cause(r.root_cause);
  s.set_last_checkpoint_step(r.last_checkpoint_step);
  s.set_wait_reason(r.wait_reason);
  s.set_current_step(r.current_step);
  s.set_submitter(r.submitter);
  v1::JobSpec spec;
  if (spec.ParseFromString(r.spec)) s.set_total_steps(spec.train().steps());
  if (const v1::MetricPoint* p = metrics_.LatestWithLoss(r.id)) s.set_loss(p->loss());
  if (const v1::MetricPoint* p = metrics_.LatestWithTokensPerS(r.id)) s.set_tokens_per_s(p->tokens_per_s());
  if (auto it = live_.find(r.id); it != live_.end()) s.set_rendezvous_address(it->second.rendezvous_address);
  if (const auto* slots = sched_.Placement(r.id)) {
    for (const Slot& sl : *slots) {
      auto* p = s.add_placement();
      p->set_rank(sl.rank);
      p->set_agent_id(sl.agent_id);
      p->set_gpu(sl.gpu);
    }
  }
  return s;
}

absl::StatusOr<v1::SubmitJobResponse> Coordinator::Submit(const v1::SubmitJobRequest& req,
                                                          const std::string& submitter) {
  auto refuse = [&](absl::Status s) {
    if (m_submitted_) m_submitted_->With({"refused"}).Inc();
    return s;
  };
  if (!req.has_spec()) return refuse(absl::InvalidArgumentError("spec: required"));
  const std::string& key = req.idempotency_key();
  if (key.size() > kMaxKeyLength) {
    return refuse(absl::InvalidArgumentError(absl::StrCat("idempotency_key: longer than ", kMaxKeyLength, " bytes")));
  }
  for (unsigned char c : key) {
    if (c < 0x20 || c > 0x7e) {
      return refuse(absl::InvalidArgumentError("idempotency_key: only printable ASCII is allowed"));
    }
  }
  v1::JobSpec spec = req.spec();
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return refuse(s);
  Demand demand = DemandOf(spec);
  std::string bytes = spec.SerializeAsString();

  std::lock_guard<std::mutex> l(mu_);
  v1::SubmitJobResponse resp;
  if (!key.empty()) {
    auto old = store_->FindByKey(key);
    if (old.ok()) {
      if (old->spec != bytes) {
        return refuse(absl::FailedPreconditionError(absl::StrCat(
            "idempotency_key: '", EchoValue(key), "' was used for ", FormatJobId(old->id), " with a different spec")));
      }
      *resp.mutable_job() = ToStatus(*old);
      resp.set_existing(true);
      return resp;
    }
    if (old.status().code() != absl::StatusCode::kNotFound) return old.status();
  }
  if (absl::Status fits = placement_->Admissible(JobFor(store::JobRecord{}, spec), req.wait_for_capacity());
      !fits.ok()) {
    return refuse(fits);
  }
  if (sched_.queue_length() >= opts_.max_queued_jobs) {
    return refuse(absl::ResourceExhaustedError(
        absl::StrCat("the queue is full (", opts_.max_queued_jobs, " jobs); retry later")));
  }
  store::NewJob nj{key, spec.name(), bytes, spec.priority(), demand.ranks, submitter};
  LOOM_ASSIGN_OR_RETURN(store::JobStore::InsertResult ins, store_->InsertJob(nj));
  if (!ins.existing) {
    if (m_submitted_) m_submitted_->With({"accepted"}).Inc();
    live_[ins.job.id].demand = demand;
    placement_->Admit(JobFor(ins.job, spec));
    NotifyLocked();
  }
  LOOM_ASSIGN_OR_RETURN(store::JobRecord now, store_->GetJob(ins.job.id));
  *resp.mutable_job() = ToStatus(now);
  resp.set_existing(ins.existing);
  return resp;
}

absl::StatusOr<v1::GetJobResponse> Coordinator::Get(const std::string& job_id) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  auto r = store_->GetJob(id);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kNotFound) return absl::NotFoundError(job_id + " not found");
    return r.status();
  }
  v1::GetJobResponse resp;
  std::lock_guard<std::mutex> l(mu_);
  *resp.mutable_job() = ToStatus(*r);
  resp.mutable_spec()->ParseFromString(r->spec);
  return resp;
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::List(const v1::ListJobsRequest& req) {
  if (req.page_size() < 0 || req.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", kMaxPageSize, "], got ", req.page_size()));
  }
  store::ListQuery q;
  q.limit = (req.page_size() == 0 ? kDefaultPageSize : req.page_size()) + 1;  // one more: is there a next page?
  q.name_prefix = req.name_prefix();
  q.newest_first = req.newest_first();
  for (int s : req.states()) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat("states: invalid job state ", s));
    }
    q.states.push_back(static_cast<v1::JobState>(s));
  }
  if (!req.page_token().empty()) {
    if (!absl::SimpleAtoi(req.page_token(), &q.after_id) || q.after_id < 0) {
      return absl::InvalidArgumentError("page_token: not a token from a previous ListJobs");
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<store::JobRecord> rows, store_->ListJobs(q));
  v1::ListJobsResponse resp;
  LOOM_ASSIGN_OR_RETURN(int64_t total, store_->CountJobs(q));
  resp.set_total_size(total);
  bool more = static_cast<int>(rows.size()) == q.limit;
  if (more) rows.pop_back();
  std::lock_guard<std::mutex> l(mu_);
  for (const store::JobRecord& r : rows) *resp.add_jobs() = ToStatus(r);
  if (more) resp.set_next_page_token(absl::StrCat(rows.back().id));
  return resp;
}

absl::StatusOr<v1::JobStatus> Coordinator::Cancel(const std::string& job_id) {
  LOOM_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id));
  std::lock_guard<std::mutex> l(mu_);
  auto r = store_->GetJob(id);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kNotFound) return absl::NotFoundError(job_id + " not found");
    return r.status();
  }
  if (store::IsTerminal(r->state)) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " is already ", v1::JobState_Name(r->state), "; nothing to cancel"));
  }
  LOOM_ASSIGN_OR_RETURN(store::JobRecord done, store_->Update(id, [](store::JobRecord& j) {
    j.state = v1::CANCELLED;
    j.wait_reason.clear();
  }, "cancelled by user"));
  placement_->Cancel(id);
  live_.erase(id);
  metrics_.Finished(id);
  ForgetOwnersLaterLocked(id);
  NotifyLocked();
  return ToStatus(done);
}

uint64_t Coordinator::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return version_ != seen || stopping_; });
  return version_;
}

void Coordinator::NotifyLocked() {
  ++version_;
  UpdateGaugesLocked();
  cv_.notify_all();
}

void Coordinator::UpdateGaugesLocked() {
  if (!m_jobs_) return;
  if (auto counts = store_->CountByState(); counts.ok()) {
    for (int s = v1::PENDING; s <= v1::CANCELLED; ++s) {
      auto it = counts->find(static_cast<v1::JobState>(s));
      m_jobs_->With({v1::JobState_Name(static_cast<v1::JobState>(s))}).Set(it == counts->end() ? 0 : it->second);
    }
  }
  m_queue_->With({}).Set(sched_.queue_length());
  m_agents_->With({}).Set(static_cast<double>(agents_.size()));
}

void Coordinator::RunScheduleLocked() {
  std::vector<std::pair<int64_t, std::string>> reasons;
  for (Decision& d : sched_.Schedule()) {
    LiveJob& live = live_[d.job_id];
    if (!d.placed) {
      if (d.wait_reason != live.last_wait_reason) {
        reasons.emplace_back(d.job_id, d.wait_reason);
        live.last_wait_reason = d.wait_reason;
      }
      continue;
    }
    std::string agents;
    for (const Slot& s : d.placement) {
      if (agents.find(s.agent_id) == std::string::npos) absl::StrAppend(&agents, agents.empty() ? "" : ",", s.agent_id);
    }
    auto r = store_->Update(d.job_id, [](store::JobRecord& j) {
      j.state = v1::SCHEDULED;
      j.wait_reason.clear();
    }, absl::StrCat("placed on ", agents));
    if (!r.ok()) {  // e.g. cancelled meanwhile: give the resources back
      sched_.Release(d.job_id);
      continue;
    }
    live.last_wait_reason.clear();
    if (m_sched_latency_) m_sched_latency_->With({}).Observe((NowMs() - r->submit_ms) / 1000.0);
    LaunchLocked(*r, d.placement);
  }
  // One transaction for all changed reasons; on failure they are retried at
  // the next pass.
  if (!store_->SetWaitReasons(reasons).ok()) {
    for (const auto& [id, why] : reasons) live_[id].last_wait_reason.clear();
  }
}

void Coordinator::LaunchLocked(const store::JobRecord& r, const std::vector<Slot>& slots) {
  LiveJob& live = live_[r.id];
  live.exits.clear();
  live.awaiting_launch.clear();
  live.rendezvous_address.clear();
  std::map<std::string, v1::LaunchOrder> per_agent;
  for (const Slot& s : slots) {
    v1::LaunchOrder& o = per_agent[s.agent_id];
    if (o.job_id().empty()) {
      o.set_job_id(FormatJobId(r.id));
      o.mutable_spec()->ParseFromString(r.spec);
      o.mutable_spec()->set_run_dir(RunDirFor(r.id, o.spec()));
      for (const std::string& root : roots_) o.add_allowed_roots(root);
      o.set_world_size(r.world_size);
      o.set_attempt(r.restart_count);
    }
    auto* p = o.add_ranks();
    p->set_rank(s.rank);
    p->set_agent_id(s.agent_id);
    p->set_gpu(s.gpu);
    if (s.rank == 0) o.set_host_rendezvous(true);
    AddRankOwnerLocked(r.id, s.rank, s.agent_id);
  }
  // The rendezvous: rank 0's agent hosts the store; the secret is new for
  // every attempt, so a stale worker of an earlier attempt cannot join.
  std::string host_addr, secret;
  for (const Slot& s : slots) {
    if (s.rank != 0) continue;
    if (auto a = agents_.find(s.agent_id); a != agents_.end()) host_addr = a->second.rendezvous_address;
  }
  if (auto sec = auth::RandomHex(24); sec.ok()) secret = *sec;
  live.rendezvous_address = host_addr;
  for (auto& [agent, order] : per_agent) {
    order.set_rendezvous_address(host_addr);
    order.set_rendezvous_secret(secret);
  }
  for (auto& [agent, order] : per_agent) {
    auto it = agents_.find(agent);
    if (it == agents_.end()) continue;
    *it->second.orders.emplace_back().mutable_launch() = std::move(order);
    live.awaiting_launch.insert(agent);
  }
}

void Coordinator::KillLocked(int64_t job_id, const std::vector<Slot>& slots) {
  std::set<std::string> done;
  for (const Slot& s : slots) {
    if (!done.insert(s.agent_id).second) continue;
    auto it = agents_.find(s.agent_id);
    if (it == agents_.end()) continue;
    auto* k = it->second.orders.emplace_back().mutable_kill();
    k->set_job_id(FormatJobId(job_id));
    k->set_grace_ms(opts_.kill_grace_ms);
  }
}

void Coordinator::FinishLocked(int64_t id, const std::function<void(store::JobRecord&)>& fn, const std::string& msg) {
  auto r = store_->Update(id, fn, msg);
  (void)r;  // a terminal job stays as it is
  if (const auto* slots = sched_.Placement(id)) KillLocked(id, *slots);
  sched_.Release(id);
  live_.erase(id);
  metrics_.Finished(id);
  ForgetOwnersLaterLocked(id);
  RunScheduleLocked();
}

void Coordinator::AddRankOwnerLocked(int64_t job, int32_t rank, const std::string& agent) {
  rank_owners_[job][rank].insert(agent);
}

void Coordinator::ForgetOwnersLaterLocked(int64_t job) {
  constexpr size_t kKeptFinished = 4096;
  finished_owners_.push_back(job);
  while (finished_owners_.size() > kKeptFinished) {
    rank_owners_.erase(finished_owners_.front());
    finished_owners_.pop_front();
  }
}

void Coordinator::RestartOrFailLocked(store::JobRecord r, int32_t rank, int32_t code, const std::string& why) {
  v1::JobSpec spec;
  spec.ParseFromString(r.spec);
  bool retryable = IsRetryableExit(code);
  LiveJob& live = live_[r.id];
  std::vector<int32_t> codes(r.world_size, kExitUnknown);
  for (const auto& [rk, c] : live.exits) {
    if (rk >= 0 && rk < r.world_size) codes[rk] = c;
  }
  if (!retryable || r.restart_count >= spec.max_restarts()) {
    FinishLocked(r.id, [&](store::JobRecord& j) {
      j.state = v1::FAILED;
      j.exit_codes = codes;
      j.root_cause_rank = rank;
      j.root_cause = why;
    }, retryable ? absl::StrCat("failed: restart budget (", spec.max_restarts(), ") spent") : "failed: bad configuration");
    return;
  }
  const std::vector<Slot>* slots = sched_.Placement(r.id);
  std::vector<Slot> kept = slots ? *slots : std::vector<Slot>();
  auto restarting = store_->Update(r.id, [&](store::JobRecord& j) {
    j.state = v1::RESTARTING;
    ++j.restart_count;
    j.exit_codes = codes;
    j.root_cause_rank = rank;
    j.root_cause = why;
  }, absl::StrCat("restarting after rank ", rank, " exited with ", code));
  if (!restarting.ok()) return;
  if (m_restarts_) m_restarts_->With({}).Inc();
  KillLocked(r.id, kept);
  if (static_cast<int32_t>(kept.size()) == r.world_size) {
    LaunchLocked(*restarting, kept);  // same placement; RUNNING once delivered
  } else {  // placement gone or partial: back in the queue
    sched_.Release(r.id);
    auto pending = store_->Update(r.id, [](store::JobRecord& j) { j.state = v1::PENDING; }, "waiting for capacity");
    if (pending.ok()) sched_.Enqueue(r.id, r.priority, r.id, live.demand);
    RunScheduleLocked();
  }
}

}  // namespace loom::runtime::service
