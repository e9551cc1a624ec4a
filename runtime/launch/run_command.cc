#include "runtime/launch/run_command.h"

#include <netdb.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/jobspec/jobspec.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/launch/node_group.h"
#include "runtime/launch/slurm_env.h"
#include "runtime/plan/planner_command.h"
#include "runtime/service/agent/agent.h"
#include "runtime/service/coordinator.h"
#include "runtime/train/onnx_model.h"
#include "runtime/service/server.h"

namespace loom::launch {
namespace {

std::atomic<bool> g_interrupted{false};
constexpr int kKillGraceMs = 5000;  // the coordinator's SIGTERM -> SIGKILL grace for ranks
void OnSignal(int) { g_interrupted = true; }

int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "loom run: %s\n", msg.c_str());
  return code;
}

struct Flags {
  std::string spec_path;
  int nproc = 0, dp = 0, tp = 0, steps = 0, max_restarts = -1;
  std::string run_dir, keep_state;
  bool json = false;
};

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  Flags f;
  const std::map<std::string, int*> ints = {{"--nproc-per-node", &f.nproc}, {"--dp", &f.dp},
                                            {"--tp", &f.tp},                {"--steps", &f.steps},
                                            {"--max-restarts", &f.max_restarts}};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto need_value = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(a, ": needs a value"));
      return args[++i];
    };
    if (auto it = ints.find(a); it != ints.end()) {
      auto v = need_value();
      if (!v.ok()) return v.status();
      int n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < (a == "--max-restarts" ? 0 : 1))
        return absl::InvalidArgumentError(absl::StrCat(a, ": expected a positive integer, got '", *v, "'"));
      *it->second = n;
    } else if (a == "--run-dir" || a == "--keep-state") {
      auto v = need_value();
      if (!v.ok()) return v.status();
      (a == "--run-dir" ? f.run_dir : f.keep_state) = *v;
    } else if (a == "--json") {
      f.json = true;
    } else if (!a.empty() && a[0] == '-') {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", a, "'"));
    } else if (f.spec_path.empty()) {
      f.spec_path = a;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "'"));
    }
  }
  if (f.spec_path.empty()) return absl::InvalidArgumentError("usage: loom run JOB.yaml [--nproc-per-node N] [flags]");
  return f;
}

// Flags over the spec, then the spec's own validation.
// --nproc-per-node counts the ranks of one of `nnodes` nodes.
absl::Status ApplyFlags(const Flags& f, int nnodes, v1::JobSpec* spec) {
  auto* p = spec->mutable_parallel();
  if (f.tp > 0) {
    p->set_tp(f.tp);
    p->set_tp_auto(false);
  }
  if (f.dp > 0) p->set_dp(f.dp);
  if (f.nproc > 0) {
    const int tp = std::max(1, p->tp());
    const int total = f.nproc * nnodes;
    const std::string what = nnodes == 1 ? absl::StrCat("--nproc-per-node: ", total, " ranks")
                                         : absl::StrCat("--nproc-per-node: ", total, " ranks on ", nnodes, " nodes");
    if (f.dp == 0 && p->dp() * tp != total) {
      if (total % tp != 0) return absl::InvalidArgumentError(absl::StrCat(what, " do not divide into tp ", tp, " groups"));
      p->set_dp(total / tp);
    }
    if (p->dp() * tp != total)
      return absl::InvalidArgumentError(absl::StrCat(what, ", but dp ", p->dp(), " x tp ", tp, " = ", p->dp() * tp));
  }
  if (f.steps > 0) spec->mutable_train()->set_steps(f.steps);
  if (f.max_restarts >= 0) spec->set_max_restarts(f.max_restarts);
  if (!f.run_dir.empty()) spec->set_run_dir(f.run_dir);
  return jobspec::ValidateJobSpec(*spec);
}

// Prints what rank 0 wrote since the last call.
void Follow(const std::string& path, int64_t* offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(*offset);
  char buf[8192];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    std::fwrite(buf, 1, in.gcount(), stdout);
    *offset += in.gcount();
  }
  std::fflush(stdout);
}

// The last `max_lines` lines of a rank's stderr log, indented, to stderr: a
// rank killed by a signal leaves no error file, and its log (the failure
// signal handler's stack trace) is gone once this run's state is cleaned up.
void PrintTail(const std::string& path, const std::string& label, int max_lines) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return;
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 64 * 1024);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return;
  const size_t first = lines.size() > static_cast<size_t>(max_lines) ? lines.size() - max_lines : 0;
  std::fprintf(stderr, "loom run: the last %zu lines of %s:\n", lines.size() - first, label.c_str());
  for (size_t i = first; i < lines.size(); ++i) std::fprintf(stderr, "  | %s\n", lines[i].c_str());
}

std::string Json(const v1::JobStatus& j) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(j, &out, o);
  return out;
}

// With device: cuda, gives the agent this machine's GPUs (the coordinator
// places a GPU job on them). Returns 0, or the exit code after saying why.
int GiveGpus(const v1::JobSpec& spec, int world, service::AgentOptions* ao) {
  if (spec.device() != "cuda") return 0;
  auto gpus = cuda::DeviceCount();
  if (!gpus.ok() || *gpus < 1)
    return Fail(1, absl::StrCat("device: cuda: no GPU on this machine (",
                                gpus.ok() ? "0 CUDA devices" : std::string(gpus.status().message()), ")"));
  if (*gpus < world) return Fail(2, absl::StrCat("device: cuda: the job needs ", world, " GPUs, this machine has ", *gpus));
  ao->gpus = *gpus;
  return 0;
}

// Follows the job until it ends: copies rank 0's stdout, reports each state
// change (as JSON with --json), and cancels the job on the first SIGINT or
// SIGTERM. `offset` is how far rank 0's stdout has been copied. A job still
// PENDING after `wait_limit_s` (0: no limit) is cancelled, and the error says
// it was `waiting_for`.
absl::StatusOr<v1::JobStatus> FollowJob(service::Coordinator* c, const std::string& job_id,
                                        const std::string& rank0_out, bool json, int64_t* offset,
                                        const std::string& waiting_for, int wait_limit_s) {
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  uint64_t version = 0;
  v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
  bool cancelled = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(wait_limit_s);
  while (true) {
    version = c->WaitForChange(version, std::chrono::milliseconds(200));
    auto got = c->Get(job_id);
    if (!got.ok()) return got.status();
    const v1::JobStatus& j = got->job();
    Follow(rank0_out, offset);
    if (j.state() != last_state) {
      last_state = j.state();
      if (json) {
        std::fprintf(stderr, "%s\n", Json(j).c_str());
      } else {
        std::fprintf(stderr, "loom run: %s %s%s\n", job_id.c_str(), v1::JobState_Name(j.state()).c_str(),
                     j.restart_count() > 0 ? absl::StrCat(" (restart ", j.restart_count(), ")").c_str() : "");
      }
    }
    if (j.state() == v1::SUCCEEDED || j.state() == v1::FAILED || j.state() == v1::CANCELLED) return j;
    if (j.state() == v1::PENDING && wait_limit_s > 0 && std::chrono::steady_clock::now() > give_up) {
      (void)c->Cancel(job_id);
      return absl::DeadlineExceededError(absl::StrCat(job_id, " still PENDING after ", wait_limit_s, " s: ", waiting_for));
    }
    if (g_interrupted && !cancelled) {
      cancelled = true;
      std::fprintf(stderr, "loom run: interrupted; cancelling %s\n", job_id.c_str());
      (void)c->Cancel(job_id);
    }
  }
}

// The exit code of a finished job: 0 when it succeeded; else 2 when a worker
// reported a configuration error (the user's input, as in the CLI) and 1
// otherwise, after the stderr tails of ranks killed by a signal and the root
// cause.
int ExitCodeOf(const v1::JobStatus& final, const std::string& job_id, const std::string& logs) {
  if (final.state() == v1::SUCCEEDED) return 0;
  for (int r = 0; r < final.exit_codes_size(); ++r)
    if (final.exit_codes(r) < 0 && final.exit_codes(r) != service::kExitUnknown)  // killed by a signal
      PrintTail(absl::StrCat(logs, "/rank", r, ".err"), absl::StrCat("rank ", r, "'s stderr"), 40);
  std::string why = final.root_cause().empty()
                        ? v1::JobState_Name(final.state())
                        : absl::StrCat("rank ", final.root_cause_rank(), ": ", final.root_cause());
  bool config = false;
  for (int code : final.exit_codes()) config |= code == service::kExitConfigError;
  return Fail(config ? 2 : 1, absl::StrCat(job_id, " ", v1::JobState_Name(final.state()), ": ", why));
}

// tp: auto: the workers plan for themselves (the same deterministic choice
// on every rank; rank 0 writes plan.txt into the run folder); planning here
// first refuses a job whose layout cannot be chosen before any process
// starts, and says what the workers will pick. 0 when the job may go.
int CheckAutoLayout(const v1::JobSpec& spec, int world) {
  if (!spec.parallel().tp_auto()) return 0;
  v1::JobSpec resolved = spec;
  auto plan = plan::ResolveAutoLayout(resolved, plan::DefaultHardware(resolved), world);
  if (!plan.ok()) return Fail(2, std::string(plan.status().message()));
  std::fprintf(stderr, "loom run: tp: auto over %d ranks: %s (%s)\n", world,
               parallel::LayoutName((*plan)->ranked[(*plan)->winner].layout).c_str(), (*plan)->reason.c_str());
  return 0;
}

// This machine's address for the other nodes: its host name, resolved.
std::string NodeAddress() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host, nullptr, &hints, &res) != 0 || res == nullptr) return host;
  char ip[64] = {0};
  int rc = getnameinfo(res->ai_addr, res->ai_addrlen, ip, sizeof ip, nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(res);
  return rc == 0 ? ip : host;
}

// The nodes this run spans: Slurm's allocation when there is one, else this
// machine alone. `in_batch`: the sbatch script itself (not an srun step).
absl::StatusOr<NodeGroup> ResolveNodeGroup(bool* in_batch) {
  *in_batch = false;
  auto slurm = SlurmFromEnv([](const char* name) { return std::getenv(name); });
  if (!slurm.ok()) return slurm.status();
  if (!slurm->has_value()) return NodeGroup{};
  const SlurmAllocation& a = **slurm;
  *in_batch = a.step_id.empty() || a.step_id == "batch";
  if (a.nnodes == 1 || *in_batch) {
    NodeGroup one;
    one.node_name = a.nodes[a.node_id];
    one.nnodes = a.nnodes;
    return one;
  }
  auto g = NodeGroupFromSlurm(a);
  if (!g.ok()) return g.status();
  g->advertise_host = NodeAddress();
  return g;
}

// In an sbatch script spanning several nodes: runs this same command as an
// srun step, one task per node (each then finds its place from the step's
// environment). Returns only when exec fails.
int ExecUnderSrun(const std::string& self, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", self, "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::fprintf(stderr, "loom run: in an sbatch script on %s nodes: running one loom run per node through srun\n",
               std::getenv("SLURM_NNODES"));
  std::fflush(stderr);
  std::vector<char*> a;
  for (auto& x : argv) a.push_back(x.data());
  a.push_back(nullptr);
  execvp("srun", a.data());
  return Fail(1, "cannot run srun (slurm-client) from the sbatch script");
}

service::AgentOptions NodeAgentOptions(const NodeGroup& g, const std::string& state, const std::string& self,
                                       int world) {
  service::AgentOptions ao;
  ao.data_dir = state + "/agent";
  ao.hostname = g.nnodes > 1 ? g.node_name : "local";
  ao.cpu_slots = world / g.nnodes;
  ao.worker_argv = {self, "worker"};
  ao.poll_wait_ms = 100;
  if (g.nnodes > 1) ao.rendezvous_host = g.advertise_host;
  return ao;
}

// A node other than node 0: an agent that joins node 0's coordinator and
// runs its share of the ranks until node 0 publishes the job's exit code, or
// until node 0's coordinator has been unreachable for g.lost_after_s.
// SIGTERM (scancel) gives node 0's cancel the coordinator's grace to stop
// the ranks, then kills what is left.
int RunJoiningNode(const NodeGroup& g, const v1::JobSpec& spec, int world, const std::string& state,
                   const std::string& self) {
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  auto rdzv = AwaitRendezvous(g);
  if (!rdzv.ok()) return Fail(1, std::string(rdzv.status().message()));
  service::AgentOptions ao = NodeAgentOptions(g, state, self, world);
  ao.coordinator = rdzv->coordinator;
  ao.join_token = rdzv->join_token;
  if (int code = GiveGpus(spec, world / g.nnodes, &ao); code != 0) return code;
  service::Agent agent(ao);
  if (absl::Status s = agent.Start(std::chrono::seconds(g.rdzv_timeout_s)); !s.ok())
    return Fail(1, absl::StrCat("node ", g.node_rank, " (", g.node_name, "): joining ", rdzv->coordinator, ": ",
                                s.message()));
  std::fprintf(stderr, "loom run: node %d (%s) joined %s with %d rank slot%s\n", g.node_rank, g.node_name.c_str(),
               rdzv->coordinator.c_str(), ao.cpu_slots, ao.cpu_slots == 1 ? "" : "s");
  std::chrono::steady_clock::time_point stop_by = std::chrono::steady_clock::time_point::max();
  auto last_seen = std::chrono::steady_clock::now(), last_probe = last_seen;
  while (true) {
    if (int code = ReadResult(g); code >= 0) {
      agent.Stop();
      return code;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_probe >= std::chrono::seconds(1)) {
      last_probe = now;
      if (Reachable(rdzv->coordinator, 1000)) last_seen = std::chrono::steady_clock::now();
    }
    if (now - last_seen > std::chrono::seconds(g.lost_after_s)) {
      agent.Stop();
      return Fail(1, absl::StrCat("node ", g.node_rank, " (", g.node_name, "): node 0's coordinator at ",
                                  rdzv->coordinator, " has been unreachable for ", g.lost_after_s,
                                  " s and published no result; stopping this node's ranks"));
    }
    if (g_interrupted && stop_by == std::chrono::steady_clock::time_point::max())
      stop_by = std::chrono::steady_clock::now() + std::chrono::milliseconds(kKillGraceMs);
    if (std::chrono::steady_clock::now() > stop_by || (g_interrupted && agent.running_ranks() == 0)) {
      agent.Stop();
      return Fail(1, "interrupted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Node 0 (or the only node): the coordinator and an agent in this process.
// With several nodes the coordinator listens on every interface, its address
// and join token go into the rendezvous folder, and the job waits for the
// other nodes' agents (up to the rendezvous timeout).
int RunFirstNode(const Flags& flags, const v1::JobSpec& spec, int world, const NodeGroup& g, const std::string& state,
                 const std::string& self) {
  const bool multi = g.nnodes > 1;
  service::ServerOptions so;
  so.coordinator.data_dir = state + "/coordinator";
  so.coordinator.heartbeat_interval_ms = 500;
  so.coordinator.kill_grace_ms = kKillGraceMs;
  so.listen_address = multi ? "0.0.0.0:0" : "127.0.0.1:0";
  auto server = service::CoordinatorServer::Start(so);
  if (!server.ok()) return Fail(1, absl::StrCat("coordinator: ", server.status().message()));
  service::AgentOptions ao = NodeAgentOptions(g, state, self, world);
  ao.coordinator = absl::StrCat("127.0.0.1:", (*server)->port());
  ao.join_token = (*server)->join_token();
  if (int code = GiveGpus(spec, world / g.nnodes, &ao); code != 0) return code;
  service::Agent agent(ao);
  if (absl::Status s = agent.Start(); !s.ok()) return Fail(1, absl::StrCat("agent: ", s.message()));
  if (multi) {
    absl::Status s = PublishRendezvous(g, {absl::StrCat(g.advertise_host, ":", (*server)->port()), ao.join_token});
    if (!s.ok()) return Fail(1, std::string(s.message()));
  }

  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_idempotency_key("loom-run");
  req.set_wait_for_capacity(multi);
  auto submitted = (*server)->coordinator()->Submit(req);
  if (!submitted.ok()) {
    bool bad = submitted.status().code() == absl::StatusCode::kInvalidArgument ||
               submitted.status().code() == absl::StatusCode::kFailedPrecondition;
    return Fail(bad ? 2 : 1, std::string(submitted.status().message()));
  }
  const std::string job_id = submitted->job().job_id();
  if (multi) {
    std::fprintf(stderr, "loom run: %s submitted (%d ranks on %d nodes, %d each; this is node 0, %s)\n",
                 job_id.c_str(), world, g.nnodes, world / g.nnodes, g.node_name.c_str());
  } else {
    std::fprintf(stderr, "loom run: %s submitted (%d rank%s on this machine)\n", job_id.c_str(), world,
                 world == 1 ? "" : "s");
  }

  const std::string logs = ao.data_dir + "/logs/" + job_id;
  int64_t offset = 0;  // into rank 0's stdout; restarts append to the same file
  const std::string waiting = absl::StrCat("not all ", g.nnodes, " nodes joined (rendezvous folder ", g.rdzv_dir, ")");
  auto final = FollowJob((*server)->coordinator(), job_id, logs + "/rank0.out", flags.json, &offset, waiting,
                         multi ? g.rdzv_timeout_s : 0);
  if (!final.ok()) return Fail(1, std::string(final.status().message()));
  // Let the agent reap the ranks, then ship nothing more.
  agent.Stop();
  Follow(logs + "/rank0.out", &offset);
  (*server)->Shutdown();
  return ExitCodeOf(*final, job_id, logs);
}

}  // namespace

int RunRunCommand(const std::vector<std::string>& args) {
  auto flags = ParseFlags(args);
  if (!flags.ok()) return Fail(2, std::string(flags.status().message()));
  bool in_batch = false;
  auto group = ResolveNodeGroup(&in_batch);
  if (!group.ok()) return Fail(2, std::string(group.status().message()));
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return Fail(1, "cannot find this executable (/proc/self/exe)");
  self[n] = '\0';
  if (in_batch && group->nnodes > 1) return ExecUnderSrun(self, args);
  auto loaded = jobspec::LoadJobSpec(flags->spec_path);
  if (!loaded.ok()) return Fail(2, std::string(loaded.status().message()));
  v1::JobSpec spec = *loaded;
  if (absl::Status s = ApplyFlags(*flags, group->nnodes, &spec); !s.ok()) return Fail(2, std::string(s.message()));
  if (absl::Status s = train::CheckOnnxJob(spec); !s.ok()) return Fail(2, std::string(s.message()));
  const int world = std::max(1, spec.parallel().dp()) * std::max(1, spec.parallel().tp());
  if (world % group->nnodes != 0)
    return Fail(2, absl::StrCat("parallel: the job's ", world, " ranks do not divide evenly over ", group->nnodes,
                                " nodes"));
  if (int code = CheckAutoLayout(spec, world); code != 0) return code;

  // This node's private folder (the coordinator's and the agent's state).
  std::string state = flags->keep_state;
  bool temporary = state.empty();
  if (temporary) {
    char tmpl[] = "/tmp/loom-run-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Fail(1, "cannot create a temporary folder in /tmp");
    state = tmpl;
  }
  struct Cleanup {
    std::string dir;
    bool on;
    ~Cleanup() {
      std::error_code ec;
      if (on) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{state, temporary};
  if (group->node_rank > 0) return RunJoiningNode(*group, spec, world, state, self);
  const int code = RunFirstNode(*flags, spec, world, *group, state, self);
  if (group->nnodes > 1) (void)PublishResult(*group, code);
  return code;
}

}  // namespace loom::launch
