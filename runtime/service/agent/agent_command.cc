#include "runtime/service/agent/agent_command.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/server.h"

namespace loom::service {
namespace {

const std::map<std::string, const char*> kFlags = {
    {"coordinator", "LOOM_COORDINATOR"}, {"data-dir", "LOOM_AGENT_DATA_DIR"}, {"token-dir", "LOOM_DATA_DIR"},
    {"cpu-slots", "LOOM_CPU_SLOTS"},     {"gpus", "LOOM_GPUS"},               {"hostname", "LOOM_HOSTNAME"},
    {"worker", "LOOM_WORKER"},           {"tls-ca", "LOOM_TLS_CA"},           {"tls-cert", "LOOM_TLS_CERT"},
    {"tls-key", "LOOM_TLS_KEY"},         {"rendezvous-host", "LOOM_RENDEZVOUS_HOST"},
    {"join-token-file", "LOOM_JOIN_TOKEN_FILE"},
};

}  // namespace

const char kAgentUsage[] = R"(usage: loom agent [flags]   (each flag also reads the environment variable shown)
Runs a node agent: registers with the coordinator, starts one worker per rank it is given.
  --coordinator HOST:PORT    LOOM_COORDINATOR (default 127.0.0.1:7070)
  --join-token-file FILE     LOOM_JOIN_TOKEN_FILE (default <token-dir>/join-token): the
                             coordinator's join token, mode 0600; LOOM_JOIN_TOKEN (the token
                             itself) wins. Exchanged at registration for the agent's own id
                             and secret; the user token is not accepted.
  --token-dir DIR            LOOM_DATA_DIR (default $HOME/.loom): where join-token is
  --data-dir DIR             LOOM_AGENT_DATA_DIR (default $HOME/.loom/agent): rank logs
  --cpu-slots N              LOOM_CPU_SLOTS (default: the number of CPUs)
  --gpus N                   LOOM_GPUS (default 0)
  --hostname NAME            LOOM_HOSTNAME (default: gethostname)
  --rendezvous-host ADDR     LOOM_RENDEZVOUS_HOST (default 127.0.0.1): where the store of
                             jobs whose rank 0 runs here listens
  --worker "CMD ARGS"        LOOM_WORKER (default "<this binary> worker")
  --tls-ca PEM [--tls-cert PEM --tls-key PEM]   LOOM_TLS_CA, LOOM_TLS_CERT, LOOM_TLS_KEY
Exit codes: 0 after SIGINT/SIGTERM, 1 when it cannot register, 2 for bad flags.
)";

absl::StatusOr<AgentFlags> ParseAgentFlags(const std::vector<std::string>& args,
                                           const std::function<const char*(const char*)>& env) {
  std::map<std::string, std::string> v;
  for (const auto& [flag, var] : kFlags) {
    const char* e = env(var);
    if (e != nullptr && *e != '\0') v[flag] = e;
  }
  AgentFlags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      f.help = true;
      return f;
    }
    if (a.rfind("--", 0) != 0) return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "'"));
    std::string name = a.substr(2), value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
    }
    if (!kFlags.count(name)) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    v[name] = value;
  }
  AgentOptions& o = f.agent;
  if (v.count("coordinator")) o.coordinator = v["coordinator"];
  const char* home = env("HOME");
  std::string base = home && *home ? std::string(home) + "/.loom" : ".loom";
  o.data_dir = v.count("data-dir") ? v["data-dir"] : base + "/agent";
  f.token_dir = v.count("token-dir") ? v["token-dir"] : base;
  f.join_token_file = v.count("join-token-file") ? v["join-token-file"] : f.token_dir + "/" + kJoinTokenFile;
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
  f.tls_ca = v["tls-ca"];
  f.tls_cert = v["tls-cert"];
  f.tls_key = v["tls-key"];
  return f;
}

int RunAgentCommand(const std::vector<std::string>& args) {
  auto f = ParseAgentFlags(args, [](const char* n) { return std::getenv(n); });
  if (!f.ok()) {
    std::fprintf(stderr, "loom agent: %s\n%s", std::string(f.status().message()).c_str(), kAgentUsage);
    return 2;
  }
  if (f->help) {
    std::fputs(kAgentUsage, stdout);
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
    auto token = ReadTokenFile(f->join_token_file, /*check_mode=*/true);
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
  absl::Status s = agent.Start(std::chrono::seconds(30));
  if (!s.ok()) {
    std::fprintf(stderr, "loom agent: cannot register with %s: %s\n", f->agent.coordinator.c_str(),
                 std::string(s.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "loom agent: registered as %s with %s (%d CPU slots, %d GPUs)\n", agent.agent_id().c_str(),
               f->agent.coordinator.c_str(), f->agent.cpu_slots, f->agent.gpus);
  int sig = 0;
  sigwait(&set, &sig);
  agent.Stop();
  return 0;
}

}  // namespace loom::service
