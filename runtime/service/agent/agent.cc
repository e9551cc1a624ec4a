#include "runtime/service/agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "base/usable_cpus.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/service/auth/token.h"

namespace loom::runtime::service::agent {

extern "C" char** environ;

namespace {
constexpr size_t kMaxKeptExits = 4096;
}  // namespace

std::string RankVisibleDevices(int gpu, const char* inherited) {
  if (inherited == nullptr || *inherited == '\0') return std::to_string(gpu);
  std::vector<std::string> listed = absl::StrSplit(inherited, ',');
  return gpu < static_cast<int>(listed.size()) ? listed[gpu] : std::to_string(gpu);
}

Agent::Agent(AgentOptions o) : opts_(std::move(o)) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Reconnect quickly after a coordinator restart (it waits a few seconds
  // for agents to reclaim their running ranks).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto creds = opts_.credentials ? opts_.credentials : grpc::InsecureChannelCredentials();
  stub_ = v1::NodeService::NewStub(grpc::CreateCustomChannel(opts_.coordinator, creds, args));
}

Agent::~Agent() { Stop(); }

std::unique_ptr<grpc::ClientContext> Agent::Ctx(int timeout_ms) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  auth::AddBearer(c.get(), secret_.empty() ? opts_.join_token : auth::AgentBearer(agent_id_, secret_));
  return c;
}

absl::Status Agent::Register() {
  absl::Status s = RegisterOnce();
  if (s.code() == absl::StatusCode::kUnauthenticated && !secret_.empty()) {
    std::fprintf(stderr,
                 "loom agent: the coordinator refuses the credential of %s (%s): registering as a new agent with the "
                 "join token\n",
                 agent_id_.c_str(), std::string(s.message()).c_str());
    {
      std::lock_guard<std::mutex> l(mu_);
      agent_id_.clear();
      secret_.clear();
    }
    s = RegisterOnce();
  }
  return s;
}

absl::Status Agent::RegisterOnce() {
  v1::RegisterAgentRequest req;
  req.set_hostname(opts_.hostname);
  req.set_agent_id(agent_id_);
  req.mutable_resources()->set_cpu_slots(opts_.cpu_slots);
  req.mutable_resources()->set_gpus(opts_.gpus);
  req.mutable_resources()->set_memory_bytes(opts_.memory_bytes);
  if (store_) req.set_rendezvous_address(store_->address());
  {
    // The placement as the coordinator knew it: running ranks and ranks that
    // exited but whose reports it may not have (an exited rank keeps its slot
    // until the job ends).
    // Only each job's latest attempt counts; earlier ones are stale.
    std::lock_guard<std::mutex> l(mu_);
    std::map<std::string, std::pair<int32_t, std::set<int32_t>>> by_job;  // job -> (attempt, ranks)
    auto add = [&](const std::string& job, int32_t attempt, int32_t rank) {
      auto [it, fresh] = by_job.try_emplace(job, attempt, std::set<int32_t>{});
      if (attempt > it->second.first) it->second = {attempt, {}};
      if (attempt == it->second.first) it->second.second.insert(rank);
    };
    for (const auto& [pid, p] : procs_) {
      if (!p.terminating) add(p.job_id, p.attempt, p.rank);
    }
    for (const ExitReport& e : exits_) add(e.req.job_id(), e.req.attempt(), e.req.rank());
    for (const auto& [job, ar] : by_job) {
      v1::RunningJob* r = req.add_running();
      r->set_job_id(job);
      r->set_attempt(ar.first);
      for (int32_t rank : ar.second) r->add_ranks()->set_rank(rank);
    }
  }
  v1::RegisterAgentResponse resp;
  grpc::Status s = stub_->RegisterAgent(Ctx(5000).get(), req, &resp);
  if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  {
    std::lock_guard<std::mutex> l(mu_);  // the metrics thread reads them
    agent_id_ = resp.agent_id();
    if (!resp.agent_secret().empty()) secret_ = resp.agent_secret();
  }
  if (resp.incarnation() != incarnation_) {
    // A coordinator that has not seen our reports or progress yet.
    for (ExitReport& e : exits_) e.delivered = false;
    for (auto& [path, p] : progress_) p.last.clear();
  }
  incarnation_ = resp.incarnation();
  if (resp.heartbeat_interval_ms() > 0) heartbeat_ms_ = resp.heartbeat_interval_ms();
  must_register_ = false;
  return absl::OkStatus();
}

void Agent::Reregister(const std::string& why) {
  std::fprintf(stderr, "loom agent: %s: registering again\n", why.c_str());
  if (absl::Status r = Register(); !r.ok()) {
    std::fprintf(stderr, "loom agent: registering again: %s\n", std::string(r.message()).c_str());
  } else {
    std::fprintf(stderr, "loom agent: registered again as %s\n", agent_id_.c_str());
  }
}

bool Agent::NewIncarnation(const std::string& incarnation) const {
  return !incarnation.empty() && incarnation != incarnation_;
}

bool TransientRegisterError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kUnknown;
}

absl::Status Agent::Start(std::chrono::milliseconds timeout, const std::function<bool()>& cancelled) {
  if (opts_.worker_argv.empty()) return absl::InvalidArgumentError("worker_argv: empty");
  if (!store_) {
    collectives::store::StoreServer::Options so;
    so.host = opts_.rendezvous_host;
    auto st = collectives::store::StoreServer::Start(so);  // tenants only: no secret of its own
    if (!st.ok()) return Annotate(st.status(), absl::StrCat("rendezvous store on ", opts_.rendezvous_host));
    store_ = std::move(*st);
  }
  const auto start = std::chrono::steady_clock::now();
  auto wait = std::chrono::milliseconds(100);
  absl::Status s;
  for (int tries = 1; TransientRegisterError(s = Register()); ++tries) {
    const auto now = std::chrono::steady_clock::now();
    if (timeout.count() > 0 && now - start >= timeout) break;
    if (cancelled && cancelled()) return absl::CancelledError("stopped before the agent could register");
    if (tries >= 4) {  // the first few cover a coordinator still starting
      std::fprintf(stderr, "loom agent: registering with %s (try %d, %lld s): %s: %s; trying again in %lld ms\n",
                   opts_.coordinator.c_str(), tries,
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(now - start).count()),
                   absl::StatusCodeToString(s.code()).c_str(), std::string(s.message()).c_str(),
                   static_cast<long long>(wait.count()));
    }
    std::this_thread::sleep_for(wait);
    wait = std::min<std::chrono::milliseconds>(wait * 2, std::chrono::seconds(5));
  }
  if (!s.ok()) return s;
  order_pass_ms_ = SteadyMs();
  thread_ = std::thread([this] { Loop(); });
  metrics_thread_ = std::thread([this] { MetricsLoop(); });
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  return absl::OkStatus();
}

void Agent::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (metrics_thread_.joinable()) metrics_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [pid, p] : procs_) kill(-pid, SIGKILL);
  for (const auto& [pid, p] : procs_) waitpid(pid, nullptr, 0);
  procs_.clear();
}

int RankThreads(int32_t threads_per_rank, int usable_cpus, int running, int starting) {
  if (threads_per_rank > 0) return threads_per_rank;
  return std::max(1, usable_cpus / std::max(1, running + starting));
}

int Agent::live_ranks() {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (const auto& [pid, p] : procs_) n += p.terminating ? 0 : 1;
  return n;
}

int Agent::running_ranks() {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(procs_.size());
}

std::vector<pid_t> Agent::process_groups(const std::string& job_id) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<pid_t> out;
  for (const auto& [pid, p] : procs_) {
    if (p.job_id == job_id) out.push_back(pid);
  }
  return out;
}

void Agent::Loop() {
  while (!stop_) {
    v1::PollOrdersRequest req;
    req.set_agent_id(agent_id_);
    req.set_wait_ms(opts_.poll_wait_ms);
    v1::PollOrdersResponse resp;
    grpc::Status s = stub_->PollOrders(Ctx(opts_.poll_wait_ms + 5000).get(), req, &resp);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND || s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        must_register_) {
      Reregister("the coordinator does not know this agent");
    } else if (s.ok() && NewIncarnation(resp.incarnation())) {
      // A restarted coordinator that already knows our id (another agent of
      // the same id, or a record) still needs our ranks and reports.
      Reregister(absl::StrCat("the coordinator restarted (incarnation ", resp.incarnation(), ")"));
    } else if (!s.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (const v1::Order& o : resp.orders()) {
      if (o.has_kill()) Kill(o.kill());
      if (o.has_launch()) Launch(o.launch());
    }
    ReapAndEscalate();
    ShipLogs();
    ShipProgress();
    DeliverExits();
    order_pass_ms_ = SteadyMs();
  }
}

void Agent::DeliverExits() {
  for (ExitReport& e : exits_) {
    if (e.delivered) continue;
    e.req.set_agent_id(agent_id_);
    v1::ReportExitResponse resp;
    grpc::Status s = stub_->ReportExit(Ctx(5000).get(), e.req, &resp);
    if ((s.error_code() == grpc::StatusCode::NOT_FOUND && s.error_message().rfind("agent_id", 0) == 0) ||
        s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      must_register_ = true;  // registered again at the next poll, then resent
      return;
    }
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return;  // the coordinator is away: resent in order later
    }
    if (s.ok() && NewIncarnation(resp.incarnation())) {
      must_register_ = true;  // answered by a coordinator we have not registered with
      return;
    }
    if (!s.ok()) {
      std::fprintf(stderr, "loom agent: exit report of %s rank %d refused: %s\n", e.req.job_id().c_str(),
                   e.req.rank(), s.error_message().c_str());
    }
    e.delivered = true;
  }
}

void Agent::DropExits(const std::string& job_id, int32_t attempt) {
  std::lock_guard<std::mutex> l(mu_);
  exits_.erase(std::remove_if(exits_.begin(), exits_.end(),
                              [&](const ExitReport& e) {
                                return e.req.job_id() == job_id && e.req.attempt() < attempt;
                              }),
               exits_.end());
}

void Agent::ShipProgress() {
  for (auto it = progress_.begin(); it != progress_.end();) {
    Progress& p = it->second;
    std::ifstream in(it->first);
    int64_t step = -1, ckpt = -1;
    std::string content;
    if (in && std::getline(in, content) && content != p.last) {
      std::istringstream fields(content);
      if (fields >> step >> ckpt) {
        v1::ReportProgressRequest req;
        req.set_agent_id(agent_id_);
        req.set_job_id(p.job_id);
        req.set_attempt(p.attempt);
        req.set_step(step);
        req.set_checkpoint_step(ckpt);
        v1::ReportProgressResponse resp;
        if (stub_->ReportProgress(Ctx(5000).get(), req, &resp).ok()) p.last = content;
      }
    }
    // Kept while the attempt runs here or its exits are undelivered, so the
    // final step reaches a coordinator that was away when the ranks ended.
    bool running = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& [pid, proc] : procs_) running |= proc.job_id == p.job_id && proc.attempt == p.attempt;
      for (const ExitReport& e : exits_) {
        running |= !e.delivered && e.req.job_id() == p.job_id && e.req.attempt() == p.attempt;
      }
    }
    it = running ? std::next(it) : progress_.erase(it);
  }
}

void Agent::ShipLogs() {
  constexpr int64_t kChunk = 256 << 10;
  for (auto it = logs_.begin(); it != logs_.end();) {
    const std::string& path = it->first;
    LogFile& lf = it->second;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      ++it;
      continue;
    }
    in.seekg(lf.shipped);
    std::string buf(kChunk, '\0');
    bool refused = false;
    while (in.read(&buf[0], kChunk) || in.gcount() > 0) {
      v1::AppendLogsRequest req;
      req.set_agent_id(agent_id_);
      req.set_job_id(lf.job_id);
      req.set_rank(lf.rank);
      req.set_stream(lf.stream);
      req.set_offset(lf.shipped);
      req.set_data(buf.data(), in.gcount());
      v1::AppendLogsResponse resp;
      grpc::Status s = stub_->AppendLogs(Ctx(5000).get(), req, &resp);
      refused = s.error_code() == grpc::StatusCode::PERMISSION_DENIED;  // not this agent's to ship (any more)
      if (refused) break;
      if (!s.ok()) return;  // retried from the same offset next time
      lf.shipped += in.gcount();
    }
    if (refused) {
      std::fprintf(stderr, "loom agent: the coordinator refuses %s: no longer shipped\n", path.c_str());
      it = logs_.erase(it);
      continue;
    }
    ++it;
  }
}

void Agent::Launch(const v1::LaunchOrder& o) {
  DropExits(o.job_id(), o.attempt());  // reports of earlier attempts are stale now
  std::string dir = opts_.data_dir + "/logs/" + o.job_id();
  std::filesystem::create_directories(dir);
  // The job's rendezvous: admit this attempt's secret (dropping the job's
  // earlier attempt, whose workers must not join the new one).
  if (o.host_rendezvous() && store_ && !o.rendezvous_secret().empty()) {
    auto old = tenants_.find(o.job_id());
    if (old != tenants_.end()) store_->RemoveTenant(old->second);
    absl::Status admitted =
        store_->AddTenant(o.rendezvous_secret(), absl::StrCat(o.job_id(), "/", o.attempt(), "/"));
    if (admitted.ok()) tenants_[o.job_id()] = o.rendezvous_secret();
  }
  const std::string spec_file = dir + "/job.yaml";
  {
    std::ofstream(spec_file + ".tmp") << jobspec::ToYaml(o.spec());
    std::filesystem::rename(spec_file + ".tmp", spec_file);
  }
  const int threads = RankThreads(o.spec().resources().threads_per_rank(), UsableCpus(), live_ranks(), o.ranks_size());
  for (const v1::RankPlacement& r : o.ranks()) {
    std::string base = dir + "/rank" + std::to_string(r.rank());
    std::string out = base + ".out", err = base + ".err", error_file = base + ".error";
    std::filesystem::remove(error_file);
    // Everything the child needs is built before fork (only async-signal-safe
    // calls between fork and exec).
    std::vector<std::string> env;
    const bool gpu = r.gpu() >= 0;
    for (char** e = environ; *e; ++e) {
      const std::string_view var(*e);
      if (var.rfind("LOOM_NUM_THREADS=", 0) == 0 || (gpu && var.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0)) continue;
      env.emplace_back(*e);
    }
    env.push_back("LOOM_NUM_THREADS=" + std::to_string(threads));
    if (gpu) env.push_back("CUDA_VISIBLE_DEVICES=" + RankVisibleDevices(r.gpu(), std::getenv("CUDA_VISIBLE_DEVICES")));
    env.push_back("LOOM_JOB_ID=" + o.job_id());
    env.push_back("LOOM_RANK=" + std::to_string(r.rank()));
    env.push_back("LOOM_WORLD_SIZE=" + std::to_string(o.world_size()));
    env.push_back("LOOM_ATTEMPT=" + std::to_string(o.attempt()));
    env.push_back("LOOM_GPU=" + std::to_string(r.gpu()));
    env.push_back("LOOM_ERROR_FILE=" + error_file);
    env.push_back("LOOM_JOB_SPEC=" + spec_file);
    // Multi-node: collectives listen on and advertise this node's address.
    if (opts_.rendezvous_host != "127.0.0.1" && opts_.rendezvous_host != "0.0.0.0" &&
        std::getenv("LOOM_COLLECTIVES_HOST") == nullptr) {
      env.push_back("LOOM_COLLECTIVES_HOST=" + opts_.rendezvous_host);
    }
    if (o.allowed_roots_size() > 0) env.push_back("LOOM_ALLOWED_ROOTS=" + absl::StrJoin(o.allowed_roots(), ":"));
    if (!o.rendezvous_address().empty()) {
      env.push_back("LOOM_STORE_ADDR=" + o.rendezvous_address());
      env.push_back("LOOM_STORE_SECRET=" + o.rendezvous_secret());
    }
    const std::string metrics_file = base + ".metrics.jsonl";
    std::filesystem::remove(metrics_file);
    env.push_back("LOOM_METRICS_FILE=" + metrics_file);
    const std::string progress_file = base + ".progress";
    if (r.rank() == 0) {
      std::filesystem::remove(progress_file);
      env.push_back("LOOM_PROGRESS_FILE=" + progress_file);
    }
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& a : opts_.worker_argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the agent died before prctl
      int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fo < 0 || fe < 0) _exit(126);
      dup2(fo, 1);
      dup2(fe, 2);
      // The agent blocks SIGTERM and SIGINT for sigwait, and a mask and
      // ignored signals survive exec: the rank starts with neither, so a
      // kill order's SIGTERM reaches it.
      struct sigaction dfl;
      std::memset(&dfl, 0, sizeof dfl);
      dfl.sa_handler = SIG_DFL;
      for (int sig = 1; sig < NSIG; ++sig) {
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
      }
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (pid < 0) continue;  // reported as lost when the coordinator restarts the group
    setpgid(pid, pid);
    if (!logs_.count(out)) logs_[out] = LogFile{o.job_id(), r.rank(), "stdout", 0};
    if (!logs_.count(err)) logs_[err] = LogFile{o.job_id(), r.rank(), "stderr", 0};
    std::lock_guard<std::mutex> l(mu_);
    Proc& p = procs_[pid];
    p.job_id = o.job_id();
    p.rank = r.rank();
    p.attempt = o.attempt();
    p.error_file = error_file;
    if (r.rank() == 0) progress_[progress_file] = Progress{o.job_id(), o.attempt(), ""};
    metric_files_[metrics_file] = MetricFile{o.job_id(), r.rank(), o.attempt(), 0};
  }
}

void Agent::Kill(const v1::KillOrder& o) {
  // The coordinator ended or restarted the job: it needs no more reports.
  DropExits(o.job_id(), std::numeric_limits<int32_t>::max());
  std::lock_guard<std::mutex> l(mu_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, o.grace_ms()));
  for (auto& [pid, p] : procs_) {
    if (p.job_id != o.job_id() || p.terminating) continue;
    kill(-pid, SIGTERM);
    p.terminating = true;
    p.kill_at = deadline;
  }
}

void Agent::ReapAndEscalate() {
  bool reaped = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto now = std::chrono::steady_clock::now();
    for (auto it = procs_.begin(); it != procs_.end();) {
      pid_t pid = it->first;
      Proc& p = it->second;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        // The rank's leader is gone; its group may still hold children.
        kill(-pid, SIGKILL);
        v1::ReportExitRequest r;
        r.set_agent_id(agent_id_);
        r.set_job_id(p.job_id);
        r.set_rank(p.rank);
        r.set_attempt(p.attempt);
        r.set_exit_code(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
        std::ifstream ef(p.error_file);
        std::stringstream ss;
        ss << ef.rdbuf();
        r.set_error(ss.str().substr(0, 4096));
        exits_.push_back(ExitReport{std::move(r), false});
        // Bounded: the oldest answered report goes first (a coordinator that
        // never ends its jobs must not grow the agent without limit).
        if (exits_.size() > kMaxKeptExits) {
          auto old = std::find_if(exits_.begin(), exits_.end(), [](const ExitReport& e) { return e.delivered; });
          exits_.erase(old != exits_.end() ? old : exits_.begin());
        }
        reaped = true;
        it = procs_.erase(it);
        continue;
      }
      if (p.terminating && now >= p.kill_at) kill(-pid, SIGKILL);
      ++it;
    }
  }
  if (reaped) {
    ShipLogs();  // the exited ranks' last lines, metrics and final progress first
    ShipMetrics();
    ShipProgress();
    DeliverExits();
  }
}

}  // namespace loom::runtime::service::agent
