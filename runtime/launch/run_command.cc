#include "runtime/launch/run_command.h"

#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "runtime/jobspec/jobspec.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/launch/node_group.h"
#include "runtime/launch/slurm_env.h"
#include "runtime/plan/planner_command.h"
#include "runtime/service/agent/agent.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/coordinator.h"
#include "runtime/train/onnx_model.h"
#include "runtime/service/server.h"

namespace loom::runtime::launch {
namespace {

std::atomic<bool> g_interrupted{false};
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
  // torchrun's multi-node flags: node 0 hosts the coordinator at the
  // rendezvous endpoint, every node an agent with --nproc-per-node slots.
  int nnodes = 1, node_rank = 0;
  std::string rdzv_endpoint, join_token_file, local_addr = "127.0.0.1";
  std::string join_token;  // read from LOOM_JOIN_TOKEN or --join-token-file
  // Set from a scheduler's environment (Slurm), not by flags: the agent's
  // name and how long node 0 waits for the other nodes (0: no limit).
  std::string node_name;
  int join_timeout_s = 0;
  int ranks_per_gpu = 0;         // 0: the spec's resources.ranks_per_gpu
  int threads_per_rank = 0;      // 0: the spec's resources.threads_per_rank
  bool backend_written = true;   // JOB.yaml names parallel.backend itself
};

// nullopt when the flags parsed into `f`, else the exit code (--help: 0).
std::optional<int> ParseFlags(const std::vector<std::string>& args, Flags& f) {
  std::vector<std::string> positional;
  FlagSet fs("loom run", "JOB.yaml",
             "Runs a job on this machine, torchrun style: a coordinator and an agent in this process launch\n"
             "`loom worker` ranks, rank 0's output is followed, and the exit code is the job's.");
  fs.Int("nproc-per-node", &f.nproc, "N", "ranks on this machine (dp = N / tp unless --dp is given)", 1)
      .Int("dp", &f.dp, "N", "data-parallel degree (overrides parallel.dp)", 1)
      .Int("tp", &f.tp, "N", "tensor-parallel degree (overrides parallel.tp)", 1)
      .Int("ranks-per-gpu", &f.ranks_per_gpu, "N",
           "device: cuda: ranks sharing one GPU (overrides resources.ranks_per_gpu; above 1 the default backend is "
           "cpu:gloo,cuda:gloo)",
           1)
      .Int("threads-per-rank", &f.threads_per_rank, "N",
           "host threads of each rank (overrides resources.threads_per_rank; default: the machine's CPUs shared "
           "among the ranks)",
           1)
      .Int("steps", &f.steps, "N", "train N steps (overrides train.steps)", 1)
      .Int("max-restarts", &f.max_restarts, "N", "restarts after a rank fails (overrides max_restarts)", 0)
      .String("run-dir", &f.run_dir, "DIR", "the run folder (overrides run_dir)")
      .String("keep-state", &f.keep_state, "DIR", "keep the coordinator's and agent's state in DIR")
      .Bool("json", &f.json, "state changes as JSON lines on stdout (rank 0's output goes to stderr)")
      .Int("nnodes", &f.nnodes, "N", "machines in the job (default 1)", 1)
      .Int("node-rank", &f.node_rank, "R", "this machine's rank: 0 hosts the coordinator (default 0)", 0)
      .String("rdzv-endpoint", &f.rdzv_endpoint, "HOST:PORT", "with --nnodes > 1: where node 0's coordinator listens")
      .String("join-token-file", &f.join_token_file, "FILE",
              "with --nnodes > 1: the join token every node shares (env LOOM_JOIN_TOKEN, the token itself, wins)")
      .String("local-addr", &f.local_addr, "ADDR",
              "this node's address for the ranks' rendezvous and collectives (default 127.0.0.1)")
      .Positionals(&positional, "JOB.yaml", 1, 1)
      .Note("torchrun: `loom run --nnodes 2 --node-rank R --rdzv-endpoint HOST:PORT --nproc-per-node K JOB.yaml` on\n"
            "each machine. Node 0 runs the coordinator at HOST:PORT and an agent, submits the job (dp x tp =\n"
            "nnodes x K) and follows it; its exit code is the job's. Other nodes run an agent that joins it,\n"
            "and exit when node 0's coordinator is gone: 0 when ranks ran here, 1 otherwise.");
  if (std::optional<int> rc = fs.Parse(args)) return rc;
  f.spec_path = positional[0];
  if (f.node_rank >= f.nnodes)
    return fs.UsageError(absl::StrCat("--node-rank: ", f.node_rank, " is not below --nnodes ", f.nnodes));
  if (f.nnodes > 1) {
    if (f.rdzv_endpoint.empty() || f.rdzv_endpoint.rfind(':') == std::string::npos)
      return fs.UsageError(absl::StrCat("--rdzv-endpoint: --nnodes ", f.nnodes, " needs HOST:PORT, got '",
                                        f.rdzv_endpoint, "'"));
    if (f.nproc == 0) return fs.UsageError("--nproc-per-node: --nnodes > 1 needs the ranks per node");
    if (!f.keep_state.empty() && f.node_rank > 0)
      return fs.UsageError("--keep-state: only node 0 keeps the coordinator's state");
    if (const char* t = std::getenv("LOOM_JOIN_TOKEN"); t != nullptr && *t != '\0') {
      f.join_token = t;
    } else if (f.join_token_file.empty()) {
      return fs.UsageError("--join-token-file: --nnodes > 1 needs a join token every node shares (or LOOM_JOIN_TOKEN)");
    } else {
      auto token = service::auth::ReadTokenFile(f.join_token_file, /*check_mode=*/true);
      if (!token.ok()) return fs.UsageError(absl::StrCat("--join-token-file: ", token.status().message()));
      f.join_token = *token;
    }
  }
  return std::nullopt;
}

// Whether the job file names parallel.backend (else its default follows
// resources.ranks_per_gpu, which --ranks-per-gpu may change).
bool BackendWritten(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto raw = jobspec::ParseJobSpecYaml(text.str());
  return !raw.ok() || !raw->parallel().backend().empty();
}

// Flags over the spec, then the spec's own validation.
absl::Status ApplyFlags(const Flags& f, v1::JobSpec* spec) {
  auto* p = spec->mutable_parallel();
  if (f.tp > 0) {
    p->set_tp(f.tp);
    p->set_tp_auto(false);
  }
  if (f.dp > 0) p->set_dp(f.dp);
  if (f.nproc > 0) {
    const int tp = std::max(1, p->tp()), ranks = f.nproc * f.nnodes;
    const std::string what = f.nnodes > 1 ? absl::StrCat(f.nnodes, " nodes x ", f.nproc) : absl::StrCat(f.nproc);
    if (f.dp == 0 && p->dp() * tp != ranks) {
      if (ranks % tp != 0)
        return absl::InvalidArgumentError(
            absl::StrCat("--nproc-per-node: ", what, " ranks do not divide into tp ", tp, " groups"));
      p->set_dp(ranks / tp);
    }
    if (p->dp() * tp != ranks)
      return absl::InvalidArgumentError(absl::StrCat("--nproc-per-node: ", what, " ranks, but dp ", p->dp(),
                                                     " x tp ", tp, " = ", p->dp() * tp));
  }
  if (f.ranks_per_gpu > 0) {
    spec->mutable_resources()->set_ranks_per_gpu(f.ranks_per_gpu);
    if (!f.backend_written) spec->mutable_parallel()->set_backend(jobspec::DefaultBackend(f.ranks_per_gpu));
  }
  if (f.threads_per_rank > 0) spec->mutable_resources()->set_threads_per_rank(f.threads_per_rank);
  if (f.steps > 0) spec->mutable_train()->set_steps(f.steps);
  if (f.max_restarts >= 0) spec->set_max_restarts(f.max_restarts);
  if (!f.run_dir.empty()) spec->set_run_dir(f.run_dir);
  return jobspec::ValidateJobSpec(*spec);
}

// Copies what rank 0 wrote since the last call to `to`.
void Follow(const std::string& path, int64_t* offset, FILE* to) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(*offset);
  char buf[8192];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    std::fwrite(buf, 1, in.gcount(), to);
    *offset += in.gcount();
  }
  std::fflush(to);
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
int GiveGpus(const v1::JobSpec& spec, int world, service::agent::AgentOptions* ao) {
  if (spec.device() != "cuda") return 0;
  auto gpus = kernels::cuda::DeviceCount();
  if (!gpus.ok() || *gpus < 1)
    return Fail(1, absl::StrCat("device: cuda: no GPU on this machine (",
                                gpus.ok() ? "0 CUDA devices" : std::string(gpus.status().message()), ")"));
  const int per_gpu = std::max(1, spec.resources().ranks_per_gpu()), need = (world + per_gpu - 1) / per_gpu;
  if (*gpus < need)
    return Fail(2, absl::StrCat("device: cuda: the job needs ", need, " GPUs (", world, " ranks, resources.ranks_per_gpu ",
                                per_gpu, "), this machine has ", *gpus));
  ao->gpus = *gpus;
  return 0;
}

// Follows the job until it ends: copies rank 0's stdout (to stderr with
// --json), reports each state change (to stderr; with --json as one JSON
// line on stdout), and cancels the job on the first SIGINT or
// SIGTERM. `offset` is how far rank 0's stdout has been copied. A job still
// PENDING after `wait_limit_s` (0: no limit) is cancelled, and the error says
// it was `waiting_for`.
absl::StatusOr<v1::JobStatus> FollowJob(service::Coordinator* c, const std::string& job_id,
                                        const std::string& rank0_out, bool json, int64_t* offset,
                                        int wait_limit_s = 0, const std::string& waiting_for = "") {
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
    Follow(rank0_out, offset, json ? stderr : stdout);
    if (j.state() != last_state) {
      last_state = j.state();
      if (json) {
        std::fprintf(stdout, "%s\n", Json(j).c_str());
        std::fflush(stdout);
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

// This executable's path, for the agent's worker command; "" if unknown.
std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  return n > 0 ? std::string(self, n) : std::string();
}

// An agent for this node's `slots` ranks, with its data under `state`.
service::agent::AgentOptions NodeAgent(const Flags& f, const std::string& coordinator, const std::string& join_token,
                                       const std::string& state, int slots) {
  service::agent::AgentOptions ao;
  ao.coordinator = coordinator;
  ao.join_token = join_token;
  ao.data_dir = state + "/agent";
  ao.hostname = !f.node_name.empty() ? f.node_name : f.nnodes > 1 ? absl::StrCat("node", f.node_rank) : "local";
  ao.cpu_slots = slots;
  ao.worker_argv = {SelfPath(), "worker"};
  ao.poll_wait_ms = 100;
  ao.rendezvous_host = f.local_addr;
  return ao;
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

// A TCP port free on `addr` now (bound, read back, released); 0 if none.
int FreePort(const std::string& addr) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (fd < 0 || inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) {
    if (fd >= 0) close(fd);
    return 0;
  }
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// Inside a Slurm allocation spanning several nodes, the multi-node flags
// (--nnodes, --node-rank, --rdzv-endpoint, the join token, --local-addr) from
// Slurm's environment: node 0 picks the endpoint and a fresh join token and
// leaves them in the rendezvous folder; the other nodes read them there.
// `*in_batch`: the sbatch script itself, outside any srun step.
absl::Status FlagsFromSlurm(Flags* f, bool* in_batch) {
  *in_batch = false;
  auto slurm = SlurmFromEnv([](const char* name) { return std::getenv(name); });
  if (!slurm.ok()) return slurm.status();
  if (!slurm->has_value() || (*slurm)->nnodes == 1) return absl::OkStatus();
  const SlurmAllocation& a = **slurm;
  *in_batch = a.step_id.empty() || a.step_id == "batch";
  if (*in_batch) return absl::OkStatus();
  auto g = NodeGroupFromSlurm(a);
  if (!g.ok()) return g.status();
  f->nnodes = g->nnodes;
  f->node_rank = g->node_rank;
  f->node_name = g->node_name;
  f->local_addr = NodeAddress();
  f->join_timeout_s = g->rdzv_timeout_s;
  if (g->node_rank > 0) {
    auto r = AwaitRendezvous(*g);
    if (!r.ok()) return r.status();
    f->rdzv_endpoint = r->coordinator;
    f->join_token = r->join_token;
    return absl::OkStatus();
  }
  const int port = FreePort(f->local_addr);
  auto token = service::auth::RandomHex(32);
  if (port == 0 || !token.ok()) return absl::UnavailableError(absl::StrCat("no free port on ", f->local_addr));
  f->rdzv_endpoint = absl::StrCat(f->local_addr, ":", port);
  f->join_token = *token;
  return PublishRendezvous(*g, {f->rdzv_endpoint, f->join_token});
}

// A device: cuda job inside a Slurm allocation: the GPUs Slurm gave this node
// (SLURM_GPUS_ON_NODE, from --gpus-per-node or --gres) must hold the job's
// ranks per node. 0 when fine (or outside Slurm, or a CPU job), else the exit
// code after saying why.
int CheckSlurmGpus(const v1::JobSpec& spec, int world, int nnodes) {
  if (spec.device() != "cuda") return 0;
  auto slurm = SlurmFromEnv([](const char* name) { return std::getenv(name); });
  if (!slurm.ok() || !slurm->has_value()) return 0;  // a malformed allocation was refused earlier
  const int per_node = world / std::max(1, nnodes), gpus = (*slurm)->gpus_on_node;
  const int per_gpu = std::max(1, spec.resources().ranks_per_gpu()), need = (per_node + per_gpu - 1) / per_gpu;
  if (gpus < 0)
    return Fail(2, absl::StrCat("SLURM_GPUS_ON_NODE: not set, but the job is device: cuda with ", per_node,
                                " rank(s) per node; ask Slurm for GPUs (sbatch --gpus-per-node=", need, ")"));
  if (gpus < need)
    return Fail(2, absl::StrCat("SLURM_GPUS_ON_NODE: Slurm gave this node ", gpus, " GPU(s), but the job puts ",
                                per_node, " rank(s) on each node, ", per_gpu, " per GPU"));
  return 0;
}

// In an sbatch script spanning several nodes: runs this same command as an
// srun step, one task per node (each then finds its place from the step's
// environment). Returns only when exec fails.
int ExecUnderSrun(const std::vector<std::string>& args) {
  // One task per node whatever the allocation's task count (SLURM_NTASKS,
  // which srun would otherwise take as its --ntasks: an allocation of
  // `--ntasks-per-node=R` has R tasks per node, one per rank).
  const char* nodes = std::getenv("SLURM_NNODES");
  const std::string n = nodes != nullptr ? nodes : "1";
  std::vector<std::string> argv = {"srun",        "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1",
                                   "--kill-on-bad-exit=1", SelfPath(), "run"};
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

// --node-rank > 0: an agent that joins node 0's coordinator, until that
// coordinator is gone (node 0 shuts it down once the job ends) or a signal.
int RunJoiningNode(const Flags& f, const v1::JobSpec& spec, int world, const std::string& state) {
  service::agent::AgentOptions ao = NodeAgent(f, f.rdzv_endpoint, f.join_token, state, world / f.nnodes);
  if (int code = GiveGpus(spec, world / f.nnodes, &ao); code != 0) return code;
  service::agent::Agent agent(ao);
  if (absl::Status s = agent.Start(std::chrono::seconds(120)); !s.ok())
    return Fail(1, absl::StrCat("node ", f.node_rank, ": cannot join ", f.rdzv_endpoint, ": ", s.message()));
  std::fprintf(stderr, "loom run: node %d joined %s (%d rank slots)\n", f.node_rank, f.rdzv_endpoint.c_str(),
               world / f.nnodes);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  auto channel = grpc::CreateCustomChannel(f.rdzv_endpoint, grpc::InsecureChannelCredentials(), args);
  bool ran = false;
  int unreachable_polls = 0;
  while (!g_interrupted && unreachable_polls < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ran |= agent.running_ranks() > 0;
    const grpc_connectivity_state st = channel->GetState(/*try_to_connect=*/true);
    unreachable_polls = st == GRPC_CHANNEL_TRANSIENT_FAILURE ? unreachable_polls + 1 : 0;
  }
  agent.Stop();
  if (g_interrupted) return Fail(1, absl::StrCat("node ", f.node_rank, ": interrupted"));
  std::fprintf(stderr, "loom run: node %d: the coordinator at %s is gone\n", f.node_rank, f.rdzv_endpoint.c_str());
  return ran ? 0 : Fail(1, absl::StrCat("node ", f.node_rank, ": no rank ran here"));
}

// Node 0 (or the only node): the coordinator, an agent, the job submitted and
// followed to its end.
int RunFirstNode(const Flags& f, const v1::JobSpec& spec, int world, const std::string& state) {
  service::ServerOptions so;
  so.coordinator.data_dir = state + "/coordinator";
  so.coordinator.heartbeat_interval_ms = 500;
  so.coordinator.kill_grace_ms = 5000;
  so.listen_address = f.nnodes > 1 ? f.rdzv_endpoint : "127.0.0.1:0";
  so.join_token = f.join_token;
  auto server = service::CoordinatorServer::Start(so);
  if (!server.ok()) return Fail(1, absl::StrCat("coordinator: ", server.status().message()));
  if (SelfPath().empty()) return Fail(1, "cannot find this executable (/proc/self/exe)");
  const std::string coordinator =
      f.nnodes > 1 ? f.rdzv_endpoint : absl::StrCat("127.0.0.1:", (*server)->port());
  service::agent::AgentOptions ao = NodeAgent(f, coordinator, (*server)->join_token(), state, world / f.nnodes);
  if (int code = GiveGpus(spec, world / f.nnodes, &ao); code != 0) return code;
  service::agent::Agent agent(ao);
  if (absl::Status s = agent.Start(); !s.ok()) return Fail(1, absl::StrCat("agent: ", s.message()));

  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_idempotency_key("loom-run");
  req.set_wait_for_capacity(f.nnodes > 1);  // the other nodes' agents join when they start
  auto submitted = (*server)->coordinator()->Submit(req);
  if (!submitted.ok()) {
    bool bad = submitted.status().code() == absl::StatusCode::kInvalidArgument ||
               submitted.status().code() == absl::StatusCode::kFailedPrecondition;
    return Fail(bad ? 2 : 1, std::string(submitted.status().message()));
  }
  const std::string job_id = submitted->job().job_id();
  if (f.nnodes > 1) {
    std::fprintf(stderr, "loom run: %s submitted (%d ranks on %d nodes; coordinator at %s)\n", job_id.c_str(),
                 world, f.nnodes, f.rdzv_endpoint.c_str());
  } else {
    std::fprintf(stderr, "loom run: %s submitted (%d rank%s on this machine)\n", job_id.c_str(), world,
                 world == 1 ? "" : "s");
  }

  const std::string logs = ao.data_dir + "/logs/" + job_id;
  int64_t offset = 0;  // into rank 0's stdout; restarts append to the same file
  auto final = FollowJob((*server)->coordinator(), job_id, logs + "/rank0.out", f.json, &offset, f.join_timeout_s,
                         absl::StrCat("not all ", f.nnodes, " nodes joined"));
  if (!final.ok()) return Fail(1, std::string(final.status().message()));
  // Let the agent reap the ranks, then ship nothing more.
  agent.Stop();
  Follow(logs + "/rank0.out", &offset, f.json ? stderr : stdout);
  (*server)->Shutdown();
  return ExitCodeOf(*final, job_id, logs);
}

}  // namespace

int RunRunCommand(const std::vector<std::string>& args) {
  Flags flags;
  if (std::optional<int> rc = ParseFlags(args, flags)) return *rc;
  if (flags.nnodes == 1) {
    bool in_batch = false;
    if (absl::Status s = FlagsFromSlurm(&flags, &in_batch); !s.ok())
      return Fail(s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1, std::string(s.message()));
    if (in_batch) return ExecUnderSrun(args);
  }
  auto loaded = jobspec::LoadJobSpec(flags.spec_path);
  if (!loaded.ok()) return Fail(2, std::string(loaded.status().message()));
  v1::JobSpec spec = *loaded;
  flags.backend_written = BackendWritten(flags.spec_path);
  if (absl::Status s = ApplyFlags(flags, &spec); !s.ok()) return Fail(2, std::string(s.message()));
  if (absl::Status s = train::CheckOnnxJob(spec); !s.ok()) return Fail(2, std::string(s.message()));
  const int world = std::max(1, spec.parallel().dp()) * std::max(1, spec.parallel().tp());
  if (world % flags.nnodes != 0)
    return Fail(2, absl::StrCat("parallel: the job's ", world, " ranks do not divide evenly over ", flags.nnodes,
                                " nodes"));
  if (int code = CheckAutoLayout(spec, world); code != 0) return code;
  if (int code = CheckSlurmGpus(spec, world, flags.nnodes); code != 0) return code;

  // The coordinator's and agent's private folder.
  std::string state = flags.keep_state;
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
  if (flags.node_rank > 0) return RunJoiningNode(flags, spec, world, state);
  return RunFirstNode(flags, spec, world, state);
}

}  // namespace loom::runtime::launch
