#include "runtime/service/coordinator_command.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/status.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/slurm/command.h"
#include "runtime/train/onnx_model.h"

namespace loom::runtime::service {
namespace {

struct FlagDef {
  const char* flag;
  const char* env;
  const char* value;
  const char* help;
};

const FlagDef kFlags[] = {
    {"data-dir", "LOOM_DATA_DIR", "DIR",
     "loom.db, logs, the user token (token) and the agents' join token (join-token), both mode 0600 "
     "(default $HOME/.loom)"},
    {"listen", "LOOM_LISTEN", "HOST:PORT", "the gRPC API (default 127.0.0.1:7070)"},
    {"metrics-listen", "LOOM_METRICS_LISTEN", "HOST:PORT|off", "GET /metrics and the web dashboard (default 127.0.0.1:7071)"},
    {"run-root", "LOOM_RUN_ROOT", "DIR",
     "run folders of jobs that set no run_dir, <run-root>/<name>-<job id> (default <data-dir>/runs)"},
    {"data-roots", "LOOM_DATA_ROOTS", "A,B", "folders jobs may read data and init_from from"},
    {"allowed-roots", "LOOM_ALLOWED_ROOTS", "A,B",
     "every path of a job spec must resolve inside one of these (symlinks followed; '..' always refused; "
     "default: the run root and the data roots)"},
    {"max-request-bytes", "LOOM_MAX_REQUEST_BYTES", "N", "largest gRPC request (default 4194304)"},
    {"max-queued-jobs", "LOOM_MAX_QUEUED_JOBS", "N", "queue bound (default 10000)"},
    {"heartbeat-ms", "LOOM_HEARTBEAT_MS", "N", "agent heartbeat period; agents silent for 3 are lost (default 1000)"},
    {"reclaim-grace-ms", "LOOM_RECLAIM_GRACE_MS", "N",
     "after a restart, how long agents have to reclaim running ranks, from when it listens (default 5000)"},
    {"kill-grace-ms", "LOOM_KILL_GRACE_MS", "N", "SIGTERM -> SIGKILL of ranks (default 10000)"},
    {"tls-cert", "LOOM_TLS_CERT", "PEM", "server certificate (with --tls-key: TLS on)"},
    {"tls-key", "LOOM_TLS_KEY", "PEM", "server key"},
    {"tls-client-ca", "LOOM_TLS_CLIENT_CA", "PEM", "mutual TLS; binds agents to their certificate"},
    {"tokens-file", nullptr, "PATH",
     "named user tokens, one 'name token' a line, mode 0600, accepted beside <data-dir>/token (name 'default'); "
     "a job records the name that submitted it"},
    {"port-file", nullptr, "PATH", "write \"<grpc port> <metrics port>\" once listening"},
    {"backend", nullptr, "agents|slurm",
     "where jobs run: agents (loom agent on each node; default) or slurm (each job one sbatch batch job; "
     "docs/slurm.md)"},
    {"slurm-ranks-per-node", nullptr, "N", "--backend slurm: most ranks of a job on one node (default 8)"},
    {"slurm-partition", nullptr, "NAME", "--backend slurm: sbatch --partition (default: the cluster's default)"},
    {"slurm-loom", nullptr, "PATH",
     "--backend slurm: the loom executable the batch scripts run on the nodes (default: this one, else loom on PATH)"},
    {"slurm-poll-ms", nullptr, "N", "--backend slurm: how often squeue is asked (default 1000)"},
    {"slurm-timeout-ms", nullptr, "N",
     "--backend slurm: time limit of each sbatch, squeue, scontrol, scancel (default 20000)"},
};

absl::Status ParseInt(const std::string& flag, const std::string& v, int lo, int hi, int* out) {
  if (!absl::SimpleAtoi(v, out) || *out < lo || *out > hi) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected an integer in [", lo, ", ", hi,
                                                   "], got '", v, "'"));
  }
  return absl::OkStatus();
}

std::vector<std::string> SplitList(const std::string& v) {
  std::vector<std::string> out;
  for (absl::string_view r : absl::StrSplit(v, ',', absl::SkipEmpty())) out.emplace_back(r);
  return out;
}

// The `loom` the Slurm batch scripts run: this executable when it is `loom`,
// else `loom` on PATH (the standalone loom_coordinator has no `run`).
std::string DefaultLoom() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string path = n > 0 ? std::string(self, n) : "";
  if (std::filesystem::path(path).filename() == "loom") return path;
  absl::StatusOr<std::string> found = slurm::FindProgram("loom");
  return found.ok() ? *found : "loom";
}

// --backend and the --slurm-* flags; with slurm, the coordinator's placement.
absl::Status ParseBackend(std::map<std::string, std::string>& v, CoordinatorFlags* out) {
  if (v.count("backend")) out->backend = v["backend"];
  if (out->backend != "agents" && out->backend != "slurm")
    return absl::InvalidArgumentError(absl::StrCat("--backend: expected agents or slurm, got '", out->backend, "'"));
  for (const char* f : {"slurm-ranks-per-node", "slurm-partition", "slurm-loom", "slurm-poll-ms", "slurm-timeout-ms"})
    if (v.count(f) && out->backend != "slurm")
      return absl::InvalidArgumentError(absl::StrCat("--", f, ": applies to --backend slurm only"));
  if (out->backend != "slurm") return absl::OkStatus();
  slurm::SlurmOptions& so = out->slurm;
  if (v.count("slurm-ranks-per-node"))
    LOOM_RETURN_IF_ERROR(ParseInt("slurm-ranks-per-node", v["slurm-ranks-per-node"], 1, 4096, &so.ranks_per_node));
  if (v.count("slurm-poll-ms"))
    LOOM_RETURN_IF_ERROR(ParseInt("slurm-poll-ms", v["slurm-poll-ms"], 50, 600000, &so.poll_ms));
  if (v.count("slurm-timeout-ms"))
    LOOM_RETURN_IF_ERROR(ParseInt("slurm-timeout-ms", v["slurm-timeout-ms"], 100, 600000, &so.command_timeout_ms));
  so.partition = v["slurm-partition"];
  so.loom = v.count("slurm-loom") ? v["slurm-loom"] : DefaultLoom();
  so.comment = absl::StrCat("loom coordinator ", out->server.coordinator.data_dir);
  const slurm::SlurmOptions copy = so;
  out->server.coordinator.make_placement = [copy]() -> absl::StatusOr<std::unique_ptr<placement::Placement>> {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<slurm::SlurmPlacement> p, slurm::SlurmPlacement::Create(copy));
    return std::unique_ptr<placement::Placement>(std::move(p));
  };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CoordinatorFlags> ParseCoordinatorFlags(const std::vector<std::string>& args, const EnvLookup& env) {
  CoordinatorFlags out;
  std::map<std::string, std::string> raw;
  FlagSet fs("loom coordinator", "",
             "Runs the coordinator daemon: job queue, scheduler, gRPC API (JobService, NodeService), /metrics.\n"
             "Each flag also reads the environment variable shown; the command line wins.");
  for (const FlagDef& d : kFlags) {
    fs.String(d.flag, &raw[d.flag], d.value, d.help);
    if (d.env != nullptr) fs.Env(d.env);
  }
  // A switch for one start; no environment variable on purpose.
  fs.Bool("init", &out.server.coordinator.init,
          "start an empty job store although <data-dir>/store.marker says loom.db existed (it is missing or "
          "empty); ids continue after the old ones");
  fs.EnvLookup(env).Note(
      "One coordinator per data folder (<data-dir>/lock) and per port.\n"
      "Exit codes: 0 after SIGINT/SIGTERM, 1 when the server cannot start, 2 for bad flags.");
  std::ostringstream sink;
  if (std::optional<int> rc = fs.Parse(args, sink, sink)) {
    if (*rc != 0) return absl::InvalidArgumentError(fs.error());
    out.help = true;
    out.usage = fs.Usage();
    return out;
  }
  std::map<std::string, std::string> v;
  for (const FlagDef& d : kFlags)
    if (fs.Seen(d.flag)) v[d.flag] = raw[d.flag];
  ServerOptions& o = out.server;
  o.coordinator.data_dir = v.count("data-dir") ? v["data-dir"] : auth::DefaultDataDir();
  o.listen_address = v.count("listen") ? v["listen"] : "127.0.0.1:7070";
  std::string m = v.count("metrics-listen") ? v["metrics-listen"] : "127.0.0.1:7071";
  if (m == "off") {
    o.metrics_port = -1;
  } else {
    size_t colon = m.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics-listen: expected HOST:PORT or off, got '", m, "'"));
    }
    o.metrics_host = m.substr(0, colon);
    absl::Status s = ParseInt("metrics-listen", m.substr(colon + 1), 0, 65535, &o.metrics_port);
    if (!s.ok()) return s;
  }
  if (v.count("max-request-bytes")) {
    absl::Status s = ParseInt("max-request-bytes", v["max-request-bytes"], 1024, 1 << 30, &o.max_receive_bytes);
    if (!s.ok()) return s;
  }
  if (v.count("heartbeat-ms")) {
    absl::Status s = ParseInt("heartbeat-ms", v["heartbeat-ms"], 10, 600000, &o.coordinator.heartbeat_interval_ms);
    if (!s.ok()) return s;
  }
  if (v.count("reclaim-grace-ms")) {
    absl::Status s = ParseInt("reclaim-grace-ms", v["reclaim-grace-ms"], 0, 3600000, &o.coordinator.reclaim_grace_ms);
    if (!s.ok()) return s;
  }
  if (v.count("max-queued-jobs")) {
    absl::Status s = ParseInt("max-queued-jobs", v["max-queued-jobs"], 1, 10000000, &o.coordinator.max_queued_jobs);
    if (!s.ok()) return s;
  }
  if (v.count("kill-grace-ms")) {
    absl::Status s = ParseInt("kill-grace-ms", v["kill-grace-ms"], 0, 3600000, &o.coordinator.kill_grace_ms);
    if (!s.ok()) return s;
  }
  o.coordinator.check_model = train::CheckOnnxJob;
  o.coordinator.run_root = v.count("run-root") ? v["run-root"] : o.coordinator.data_dir + "/runs";
  if (v.count("data-roots")) o.coordinator.data_roots = SplitList(v["data-roots"]);
  if (v.count("allowed-roots")) o.coordinator.allowed_roots = SplitList(v["allowed-roots"]);
  if (v.count("port-file")) out.port_file = v["port-file"];
  if (v.count("tokens-file")) o.tokens_file = v["tokens-file"];
  if (absl::Status s = ParseBackend(v, &out); !s.ok()) return s;
  o.tls_cert_file = v["tls-cert"];
  o.tls_key_file = v["tls-key"];
  o.tls_client_ca_file = v["tls-client-ca"];
  return out;
}

int RunCoordinatorCommand(const std::vector<std::string>& args) {
  auto flags = ParseCoordinatorFlags(args, [](const char* n) { return std::getenv(n); });
  if (!flags.ok()) {
    std::fprintf(stderr, "loom coordinator: %s\n(run 'loom coordinator --help' for its flags)\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    std::fputs(flags->usage.c_str(), stdout);
    return 0;
  }
  // Block the shutdown signals before gRPC starts its threads, so they all
  // inherit the mask and only sigwait below receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto server = CoordinatorServer::Start(flags->server);
  if (!server.ok()) {
    std::fprintf(stderr, "loom coordinator: %s\n", std::string(server.status().message()).c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::fprintf(stderr, "loom coordinator: listening on port %d (metrics port %d), data dir %s, backend %s\n",
               (*server)->port(), (*server)->metrics_port(), flags->server.coordinator.data_dir.c_str(),
               (*server)->coordinator()->backend().c_str());
  if (!flags->port_file.empty()) {
    std::string tmp = flags->port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << " " << (*server)->metrics_port() << "\n";
    std::error_code ec;
    std::filesystem::rename(tmp, flags->port_file, ec);
    if (ec) {
      std::fprintf(stderr, "loom coordinator: --port-file: %s\n", ec.message().c_str());
      return 1;
    }
  }
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "loom coordinator: signal %d, shutting down\n", sig);
  (*server)->Shutdown();
  return 0;
}

}  // namespace loom::runtime::service
