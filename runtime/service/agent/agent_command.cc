#include "runtime/service/agent/agent_command.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/server.h"

namespace loom::runtime::service::agent {
namespace {

struct FlagDef {
  const char* name;
  const char* env;
  const char* value;
  const char* help;
};

const FlagDef kFlags[] = {
    {"coordinator", "LOOM_COORDINATOR", "HOST:PORT", "the coordinator (default 127.0.0.1:7070)"},
    {"rdzv-endpoint", nullptr, "HOST:PORT", "torchrun's name for --coordinator"},
    {"join-token-file", "LOOM_JOIN_TOKEN_FILE", "FILE",
     "the coordinator's join token, mode 0600 (default <token-dir>/join-token; env LOOM_JOIN_TOKEN, the token "
     "itself, wins); exchanged at registration for the agent's own id and secret"},
    {"token-dir", "LOOM_DATA_DIR", "DIR", "where join-token is (default $HOME/.loom)"},
    {"data-dir", "LOOM_AGENT_DATA_DIR", "DIR", "rank logs (default $HOME/.loom/agent)"},
    {"cpu-slots", "LOOM_CPU_SLOTS", "N", "CPU ranks this node runs (default: the number of CPUs)"},
    {"gpus", "LOOM_GPUS", "N", "GPUs this node offers (default 0)"},
    {"nproc-per-node", nullptr, "N", "torchrun's name: N ranks here (N of the --gpus GPUs, else N CPU slots)"},
    {"hostname", "LOOM_HOSTNAME", "NAME", "this node's name (default: gethostname)"},
    {"rendezvous-host", "LOOM_RENDEZVOUS_HOST", "ADDR",
     "where the store of jobs whose rank 0 runs here listens (default 127.0.0.1)"},
    {"worker", "LOOM_WORKER", "\"CMD ARGS\"", "the worker command, split on spaces (default \"<this binary> worker\")"},
    {"tls-ca", "LOOM_TLS_CA", "PEM", "use TLS, verify the coordinator against this CA"},
    {"tls-cert", "LOOM_TLS_CERT", "PEM", "client certificate for mutual TLS"},
    {"tls-key", "LOOM_TLS_KEY", "PEM", "client key for mutual TLS"},
    {"register-timeout-s", "LOOM_REGISTER_TIMEOUT_S", "N",
     "give up (exit 1) when the coordinator cannot be reached for N seconds at start; default 0: keep trying, "
     "the wait between tries growing to 5 s, until SIGINT/SIGTERM"},
};

// --nproc-per-node over --cpu-slots / --gpus.
absl::Status ApplyNprocPerNode(const std::string& value, bool cpu_slots_given, AgentOptions& o) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1)
    return absl::InvalidArgumentError(absl::StrCat("--nproc-per-node: expected a count >= 1, got '", value, "'"));
  if (o.gpus > 0) {
    if (n > o.gpus)
      return absl::InvalidArgumentError(absl::StrCat("--nproc-per-node: ", n, " ranks, but --gpus offers ", o.gpus));
    o.gpus = n;
    return absl::OkStatus();
  }
  if (cpu_slots_given) return absl::InvalidArgumentError("--nproc-per-node: give it or --cpu-slots, not both");
  o.cpu_slots = n;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AgentFlags> ParseAgentFlags(const std::vector<std::string>& args,
                                           const std::function<const char*(const char*)>& env) {
  AgentFlags f;
  std::map<std::string, std::string> raw;
  FlagSet fs("loom agent", "",
             "Runs a node agent: registers with the coordinator, starts one worker per rank it is given.\n"
             "Each flag also reads the environment variable shown; the command line wins.");
  for (const FlagDef& d : kFlags) {
    fs.String(d.name, &raw[d.name], d.value, d.help);
    if (d.env != nullptr) fs.Env(d.env);
  }
  fs.EnvLookup(env).Note("Exit codes: 0 after SIGINT/SIGTERM, 1 when the coordinator refuses it or --register-timeout-s runs out, 2 for bad flags.");
  std::ostringstream sink;
  if (std::optional<int> rc = fs.Parse(args, sink, sink)) {
    if (*rc != 0) return absl::InvalidArgumentError(fs.error());
    f.help = true;
    f.usage = fs.Usage();
    return f;
  }
  std::map<std::string, std::string> v;
  for (const FlagDef& d : kFlags)
    if (fs.Seen(d.name)) v[d.name] = raw[d.name];
  if (v.count("rdzv-endpoint")) v["coordinator"] = v["rdzv-endpoint"];
  AgentOptions& o = f.agent;
  if (v.count("coordinator")) o.coordinator = v["coordinator"];
  const char* home = env("HOME");
  std::string base = home && *home ? std::string(home) + "/.loom" : ".loom";
  o.data_dir = v.count("data-dir") ? v["data-dir"] : base + "/agent";
  f.token_dir = v.count("token-dir") ? v["token-dir"] : base;
  f.join_token_file = v.count("join-token-file") ? v["join-token-file"] : f.token_dir + "/" + auth::kJoinTokenFile;
  o.cpu_slots = static_cast<int>(std::thread::hardware_concurrency());
  if (v.count("cpu-slots") && (!absl::SimpleAtoi(v["cpu-slots"], &o.cpu_slots) || o.cpu_slots < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--cpu-slots: expected a count, got '", v["cpu-slots"], "'"));
  }
  if (v.count("gpus") && (!absl::SimpleAtoi(v["gpus"], &o.gpus) || o.gpus < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus: expected a count, got '", v["gpus"], "'"));
  }
  if (o.cpu_slots == 0 && o.gpus == 0) return absl::InvalidArgumentError("--cpu-slots: the agent offers nothing");
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  o.memory_bytes = pages > 0 && page > 0 ? int64_t{pages} * page : 0;  // the coordinator's memory fit
  if (v.count("hostname")) {
    o.hostname = v["hostname"];
  } else {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) == 0) o.hostname = host;
  }
  if (v.count("worker")) {
    for (absl::string_view p : absl::StrSplit(v["worker"], ' ', absl::SkipEmpty())) o.worker_argv.emplace_back(p);
    if (o.worker_argv.empty()) return absl::InvalidArgumentError("--worker: empty command");
  } else {
    o.worker_argv = {"/proc/self/exe", "worker"};
  }
  if (v.count("rendezvous-host")) {
    if (v["rendezvous-host"].empty()) return absl::InvalidArgumentError("--rendezvous-host: empty");
    o.rendezvous_host = v["rendezvous-host"];
  }
  if (v.count("nproc-per-node")) {
    if (absl::Status st = ApplyNprocPerNode(v["nproc-per-node"], v.count("cpu-slots") > 0, o); !st.ok()) return st;
  }
  if (v.count("register-timeout-s") &&
      (!absl::SimpleAtoi(v["register-timeout-s"], &f.register_timeout_s) || f.register_timeout_s < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--register-timeout-s: expected seconds >= 0, got '", v["register-timeout-s"], "'"));
  }
  f.tls_ca = v["tls-ca"];
  f.tls_cert = v["tls-cert"];
  f.tls_key = v["tls-key"];
  return f;
}

int RunAgentCommand(const std::vector<std::string>& args) {
  auto f = ParseAgentFlags(args, [](const char* n) { return std::getenv(n); });
  if (!f.ok()) {
    std::fprintf(stderr, "loom agent: %s\n(run 'loom agent --help' for its flags)\n",
                 std::string(f.status().message()).c_str());
    return 2;
  }
  if (f->help) {
    std::fputs(f->usage.c_str(), stdout);
    return 0;
  }
  if (f->agent.worker_argv[0] == "/proc/self/exe") {
    char self[4096] = {0};
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) f->agent.worker_argv[0] = std::string(self, n);
  }
  if (const char* t = std::getenv("LOOM_JOIN_TOKEN"); t != nullptr && *t != '\0') {
    f->agent.join_token = t;
  } else {
    auto token = auth::ReadTokenFile(f->join_token_file, /*check_mode=*/true);
    if (!token.ok()) {
      std::fprintf(stderr, "loom agent: --join-token-file: %s (or set LOOM_JOIN_TOKEN)\n",
                   std::string(token.status().message()).c_str());
      return 2;
    }
    f->agent.join_token = *token;
  }
  auto creds = MakeClientCredentials(f->tls_ca, f->tls_cert, f->tls_key);
  if (!creds.ok()) {
    std::fprintf(stderr, "loom agent: %s\n", std::string(creds.status().message()).c_str());
    return 2;
  }
  f->agent.credentials = *creds;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  Agent agent(f->agent);
  // SIGINT/SIGTERM are blocked: one that arrives while registering stays pending.
  auto signalled = [&set] {
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) != 0) return false;
    return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
  };
  absl::Status s = agent.Start(std::chrono::seconds(f->register_timeout_s), signalled);
  if (s.code() == absl::StatusCode::kCancelled) {
    std::fprintf(stderr, "loom agent: %s\n", std::string(s.message()).c_str());
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "loom agent: cannot register with %s: %s: %s\n", f->agent.coordinator.c_str(),
                 absl::StatusCodeToString(s.code()).c_str(), std::string(s.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "loom agent: registered as %s with %s (%d CPU slots, %d GPUs)\n", agent.agent_id().c_str(),
               f->agent.coordinator.c_str(), f->agent.cpu_slots, f->agent.gpus);
  int sig = 0;
  sigwait(&set, &sig);
  agent.Stop();
  return 0;
}

}  // namespace loom::runtime::service::agent
