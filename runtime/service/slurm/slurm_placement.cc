#include "runtime/service/slurm/slurm_placement.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/service/slurm/command.h"

namespace loom::runtime::service::slurm {
namespace {

constexpr int kExitUnknown = -1000;  // as the coordinator records a rank that had not exited

std::string Trim(std::string s, size_t max = 400) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t start = s.find_first_not_of(" \n");
  s = start == std::string::npos ? "" : s.substr(start);
  if (s.size() > max) s = s.substr(s.size() - max);
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

// The last `"step": N` of a run folder's metrics.jsonl (its last 4 KiB); -1 when none.
int64_t LastStep(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl", std::ios::binary | std::ios::ate);
  if (!in) return -1;
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = tail.rfind("\"step\": ");
  int64_t step = -1;
  if (at == std::string::npos) return -1;
  const size_t begin = at + 8, end = tail.find_first_not_of("0123456789", begin);
  if (!absl::SimpleAtoi(tail.substr(begin, end - begin), &step)) return -1;
  return step;
}

// The last non-empty line of a file (its last 4 KiB).
std::string LastLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - 4096));
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> lines = absl::StrSplit(tail, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : Trim(lines.back(), 300);
}

// A Slurm command's failure as one line: its own words and what they point at.
std::string Failure(const std::string& what, const absl::StatusOr<CommandResult>& r) {
  if (!r.ok()) {
    std::string hint = r.status().code() == absl::StatusCode::kDeadlineExceeded
                           ? "; the Slurm controller (slurmctld) did not answer in time"
                           : "";
    return absl::StrCat(what, ": ", r.status().message(), hint);
  }
  std::string diag = DiagnoseSlurmError(r->err);
  return absl::StrCat(what, " failed (exit ", r->exit_code, "): ", Trim(r->err.empty() ? r->out : r->err),
                      diag.empty() ? "" : absl::StrCat(" [", diag, "]"));
}

bool IsTerminal(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Gang GangFor(int ranks, int ranks_per_node) {
  ranks = std::max(1, ranks);
  ranks_per_node = std::max(1, ranks_per_node);
  int nodes = (ranks + ranks_per_node - 1) / ranks_per_node;
  while (ranks % nodes != 0) ++nodes;
  return Gang{nodes, ranks / nodes};
}

v1::JobState MapSlurmState(const std::string& slurm_state) {
  std::string s = slurm_state.substr(0, slurm_state.find_first_of(" +"));
  if (s == "PENDING") return v1::PENDING;
  if (s == "COMPLETED") return v1::SUCCEEDED;
  if (s == "CANCELLED") return v1::CANCELLED;
  for (const char* f : {"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "BOOT_FAIL", "DEADLINE", "PREEMPTED"})
    if (s == f) return v1::FAILED;
  for (const char* r : {"CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                        "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT"})
    if (s == r) return v1::RUNNING;
  return v1::JOB_STATE_UNSPECIFIED;
}

std::map<std::string, std::string> ParseScontrolLine(const std::string& line) {
  std::map<std::string, std::string> out;
  for (absl::string_view field : absl::StrSplit(Trim(line, line.size()), ' ', absl::SkipEmpty())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    out.emplace(std::string(field.substr(0, eq)), std::string(field.substr(eq + 1)));
  }
  return out;
}

std::string DiagnoseSlurmError(const std::string& text) {
  if (absl::StrContains(absl::AsciiStrToLower(text), "munge"))
    return "munge is not reachable: is munged running, with its socket where slurm.conf's AuthInfo says?";
  if (absl::StrContains(text, "Unable to contact slurm controller") || absl::StrContains(text, "Connection refused") ||
      absl::StrContains(text, "Socket timed out"))
    return "the Slurm controller (slurmctld) is down or unreachable";
  return "";
}

absl::StatusOr<std::unique_ptr<SlurmPlacement>> SlurmPlacement::Create(const SlurmOptions& o) {
  if (o.loom.empty()) return absl::InvalidArgumentError("slurm backend: the loom executable's path is empty");
  if (o.ranks_per_node < 1)
    return absl::InvalidArgumentError(absl::StrCat("--slurm-ranks-per-node: must be >= 1, got ", o.ranks_per_node));
  for (const char* tool : {"sbatch", "squeue", "scontrol", "scancel"}) {
    absl::StatusOr<std::string> p = FindProgram(tool);
    if (!p.ok())
      return absl::FailedPreconditionError(
          absl::StrCat("--backend slurm: ", p.status().message(), " (Slurm's client tools, Debian's slurm-client)"));
  }
  std::unique_ptr<SlurmPlacement> p(new SlurmPlacement(o));
  absl::StatusOr<CommandResult> r = RunCommand({"squeue", "-h", "--me", "-o", "%i"}, p->timeout());
  if (!r.ok() || r->exit_code != 0)
    return absl::UnavailableError(absl::StrCat("--backend slurm: cannot reach Slurm: ", Failure("squeue", r)));
  return p;
}

SlurmPlacement::~SlurmPlacement() { Stop(); }

absl::Status SlurmPlacement::Start(placement::Sink* sink) {
  std::lock_guard<std::mutex> l(mu_);
  sink_ = sink;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void SlurmPlacement::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status SlurmPlacement::Admissible(const placement::Job&, bool) {
  return absl::OkStatus();  // Slurm judges the gang: sbatch refuses what the cluster cannot hold
}

void SlurmPlacement::Admit(const placement::Job& job) { Resume(job, ""); }

void SlurmPlacement::Resume(const placement::Job& job, const std::string& ref) {
  std::lock_guard<std::mutex> l(mu_);
  Tracked& t = jobs_[job.id];
  t.job = job;
  t.slurm_id = ref;
  t.ran = job.state == v1::RUNNING || job.state == v1::RESTARTING;
  cv_.notify_all();
}

void SlurmPlacement::Cancel(int64_t job) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  it->second.cancel = true;
  cv_.notify_all();
}

void SlurmPlacement::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    l.unlock();
    SubmitNew();
    SendCancels();
    PollStates();
    l.lock();
    if (stopping_) break;
    // Wake early for work of our own: a new job or a cancel.
    auto work = [&] {
      if (stopping_) return true;
      for (const auto& [id, t] : jobs_)
        if ((t.slurm_id.empty() && !t.cancel) || (t.cancel && !t.cancel_sent && !t.slurm_id.empty())) return true;
      return false;
    };
    cv_.wait_for(l, std::chrono::milliseconds(o_.poll_ms), work);
  }
}

int GpusPerNode(const v1::JobSpec& spec, const Gang& g) {
  if (spec.device() != "cuda") return 0;
  const int per_gpu = std::max(1, spec.resources().ranks_per_gpu());
  return (g.ranks_per_node + per_gpu - 1) / per_gpu;
}

absl::StatusOr<std::string> SlurmPlacement::Sbatch(const placement::Job& job) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(job.run_dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("run folder ", job.run_dir, ": ", ec.message()));
  const std::string spec = job.run_dir + "/job.yaml", script = job.run_dir + "/loom.sbatch";
  std::ofstream(spec) << jobspec::ToYaml(job.spec);
  std::ofstream(script) << "#!/bin/bash\n# " << job.job_id << " (" << job.spec.name()
                        << "), placed by loom coordinator --backend slurm.\nexec " << Quote(o_.loom) << " run "
                        << Quote(spec) << " --run-dir " << Quote(job.run_dir) << "\n";
  if (!fs::exists(script)) return absl::FailedPreconditionError(absl::StrCat("cannot write ", script));
  const Gang g = GangFor(job.world_size, o_.ranks_per_node);
  std::vector<std::string> argv = {"sbatch",
                                   "--parsable",
                                   absl::StrCat("--job-name=loom.", job.spec.name(), ".", job.job_id),
                                   absl::StrCat("--nodes=", g.nodes),
                                   absl::StrCat("--ntasks-per-node=", g.ranks_per_node),
                                   absl::StrCat("--output=", job.run_dir, "/slurm-%j.out"),
                                   absl::StrCat("--chdir=", job.run_dir),
                                   job.spec.max_restarts() > 0 ? "--requeue" : "--no-requeue"};
  if (const int gpus = GpusPerNode(job.spec, g); gpus > 0) argv.push_back(absl::StrCat("--gpus-per-node=", gpus));
  if (!o_.partition.empty()) argv.push_back("--partition=" + o_.partition);
  if (!o_.comment.empty()) argv.push_back("--comment=" + o_.comment);
  argv.push_back(script);
  absl::StatusOr<CommandResult> r = RunCommand(argv, timeout(), job.run_dir);
  if (!r.ok() || r->exit_code != 0) return absl::UnavailableError(Failure("sbatch", r));
  std::string id = Trim(r->out);
  id = id.substr(0, id.find(';'));  // "<id>[;<cluster>]"
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    return absl::InternalError(absl::StrCat("sbatch --parsable printed '", Trim(r->out, 100), "', not a job id"));
  return id;
}

void SlurmPlacement::SubmitNew() {
  std::vector<placement::Job> todo;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.slurm_id.empty() && it->second.cancel) {
        it = jobs_.erase(it);  // cancelled before it reached Slurm
        continue;
      }
      if (it->second.slurm_id.empty()) todo.push_back(it->second.job);
      ++it;
    }
  }
  for (const placement::Job& job : todo) {
    absl::StatusOr<std::string> id = Sbatch(job);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      if (id.ok()) {
        jobs_[job.id].slurm_id = *id;
      } else {
        jobs_.erase(job.id);
      }
    }
    if (id.ok()) {
      sink_->Placed(job.id, *id, absl::StrCat(job.run_dir, "/slurm-", *id, ".out"),
                    absl::StrCat("submitted to Slurm as job ", *id));
      continue;
    }
    placement::Observation o;
    o.job = job.id;
    o.state = v1::FAILED;
    o.exit_code = kExitUnknown;
    o.root_cause = std::string(id.status().message());
    o.message = "failed: not submitted to Slurm";
    sink_->Observe(o);
  }
}

void SlurmPlacement::SendCancels() {
  std::vector<std::pair<int64_t, std::string>> todo;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, t] : jobs_)
      if (t.cancel && !t.cancel_sent && !t.slurm_id.empty()) todo.emplace_back(id, t.slurm_id);
  }
  for (const auto& [id, slurm_id] : todo) {
    absl::StatusOr<CommandResult> r = RunCommand({"scancel", slurm_id}, timeout());
    if (!r.ok() || r->exit_code != 0) {
      std::fprintf(stderr, "loom coordinator: %s (retrying)\n", Failure("scancel " + slurm_id, r).c_str());
      continue;
    }
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = jobs_.find(id); it != jobs_.end()) it->second.cancel_sent = true;
  }
}

void SlurmPlacement::PollStates() {
  std::vector<Tracked> snapshot;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, t] : jobs_)
      if (!t.slurm_id.empty()) snapshot.push_back(t);
  }
  if (snapshot.empty()) return;
  std::vector<std::string> ids;
  for (const Tracked& t : snapshot) ids.push_back(t.slurm_id);
  absl::StatusOr<CommandResult> r =
      RunCommand({"squeue", "-h", "-t", "all", "-j", absl::StrJoin(ids, ","), "-o", "%i %T %r"}, timeout());
  // squeue asked for one job id that Slurm no longer knows says so and fails.
  const bool none_known = r.ok() && r->exit_code != 0 && absl::StrContains(r->err, "Invalid job id");
  if (!none_known && (!r.ok() || r->exit_code != 0)) {
    std::fprintf(stderr, "loom coordinator: %s (retrying)\n", Failure("squeue", r).c_str());
    return;
  }
  std::map<std::string, std::pair<std::string, std::string>> seen;  // id -> (state, reason)
  if (!none_known) {
    for (absl::string_view line : absl::StrSplit(r->out, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(' ', 2));
      if (f.size() >= 2) seen[f[0]] = {f[1], f.size() > 2 ? f[2] : ""};
    }
  }
  for (Tracked& t : snapshot) {
    auto it = seen.find(t.slurm_id);
    placement::Observation o = it == seen.end() ? Forgotten(t) : Observe(t, it->second.first, it->second.second);
    const bool ended = IsTerminal(o.state);
    const std::string key = absl::StrCat(o.state, "|", o.wait_reason, "|", o.restarts, "|", o.current_step);
    bool send = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto j = jobs_.find(t.job.id);
      if (j == jobs_.end()) continue;
      j->second.ran = t.ran;
      j->second.slurm_state = t.slurm_state;
      send = j->second.last_report != key;
      j->second.last_report = key;
      if (ended) jobs_.erase(j);
    }
    if (send) Report(o);
  }
}

std::map<std::string, std::string> SlurmPlacement::Details(const std::string& slurm_id) {
  absl::StatusOr<CommandResult> r = RunCommand({"scontrol", "show", "job", "-o", slurm_id}, timeout());
  if (!r.ok() || r->exit_code != 0) return {};
  return ParseScontrolLine(r->out);
}

placement::Observation SlurmPlacement::Observe(Tracked& t, const std::string& state, const std::string& reason) {
  const v1::JobState mapped = MapSlurmState(state);
  if (IsTerminal(mapped)) return Ended(t, state);
  // Requeues show as a count in scontrol's record: read it when the state moves.
  if (state != t.slurm_state && t.ran) {
    std::map<std::string, std::string> d = Details(t.slurm_id);
    int32_t n = 0;
    if (auto it = d.find("Restarts"); it != d.end() && absl::SimpleAtoi(it->second, &n)) t.restarts = n;
  }
  t.slurm_state = state;
  placement::Observation o;
  o.job = t.job.id;
  o.restarts = t.restarts;
  if (mapped == v1::RUNNING || (t.ran && t.restarts > 0)) {
    t.ran = true;
    o.state = v1::RUNNING;
    o.current_step = LastStep(t.job.run_dir);
    o.message = absl::StrCat("Slurm job ", t.slurm_id, " ", state, t.restarts > 0 ? " (requeued)" : "");
    return o;
  }
  o.state = v1::PENDING;
  o.wait_reason =
      absl::StrCat("Slurm job ", t.slurm_id, " is ", state, mapped == v1::PENDING ? "" : " (not a state Loom knows)",
                   reason.empty() || reason == "None" ? "" : absl::StrCat(": ", reason));
  return o;
}

placement::Observation SlurmPlacement::Ended(const Tracked& t, const std::string& state) {
  std::map<std::string, std::string> d = Details(t.slurm_id);
  placement::Observation o;
  o.job = t.job.id;
  o.state = MapSlurmState(state);
  o.restarts = t.restarts;
  if (int32_t n = 0; absl::SimpleAtoi(d["Restarts"], &n)) o.restarts = n;
  o.current_step = LastStep(t.job.run_dir);
  // ExitCode=<status>:<signal>
  std::vector<std::string> ec = absl::StrSplit(d["ExitCode"], ':');
  int code = 0, sig = 0;
  const bool known = ec.size() == 2 && absl::SimpleAtoi(ec[0], &code) && absl::SimpleAtoi(ec[1], &sig);
  o.exit_code = !known ? kExitUnknown : sig != 0 ? -sig : code;
  o.message = absl::StrCat("Slurm job ", t.slurm_id, " ", state);
  if (o.state != v1::FAILED) return o;
  const std::string last = LastLine(absl::StrCat(t.job.run_dir, "/slurm-", t.slurm_id, ".out"));
  o.root_cause =
      absl::StrCat("Slurm job ", t.slurm_id, " ended ", state, ", exit code ", known ? d["ExitCode"] : "unknown",
                   d["Reason"].empty() || d["Reason"] == "None" ? "" : absl::StrCat(", reason ", d["Reason"]),
                   last.empty() ? "" : absl::StrCat(": ", last));
  return o;
}

placement::Observation SlurmPlacement::Forgotten(const Tracked& t) {
  // With accounting, sacct still knows how the job ended.
  if (FindProgram("sacct").ok()) {
    absl::StatusOr<CommandResult> r =
        RunCommand({"sacct", "-n", "-X", "-P", "-j", t.slurm_id, "-o", "State"}, timeout());
    if (r.ok() && r->exit_code == 0) {
      const std::string state = Trim(r->out, 64);
      if (IsTerminal(MapSlurmState(state))) return Ended(t, state);
    }
  }
  placement::Observation o;
  o.job = t.job.id;
  o.state = v1::FAILED;
  o.exit_code = kExitUnknown;
  o.root_cause = absl::StrCat("Slurm job ", t.slurm_id,
                              " is no longer known to Slurm and was not seen to end (no accounting to ask)");
  o.message = "failed: lost in Slurm";
  return o;
}

void SlurmPlacement::Report(const placement::Observation& o) {
  placement::Sink* sink = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    sink = sink_;
  }
  sink->Observe(o);
}

}  // namespace loom::runtime::service::slurm
