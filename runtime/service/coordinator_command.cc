#include "runtime/service/coordinator_command.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/service/auth/token.h"
#include "runtime/train/onnx_model.h"

namespace loom::service {
namespace {

struct FlagDef {
  const char* flag;
  const char* env;
};

const FlagDef kFlags[] = {
    {"data-dir", "LOOM_DATA_DIR"},
    {"listen", "LOOM_LISTEN"},
    {"metrics-listen", "LOOM_METRICS_LISTEN"},
    {"max-request-bytes", "LOOM_MAX_REQUEST_BYTES"},
    {"allowed-roots", "LOOM_ALLOWED_ROOTS"},
    {"run-root", "LOOM_RUN_ROOT"},
    {"data-roots", "LOOM_DATA_ROOTS"},
    {"kill-grace-ms", "LOOM_KILL_GRACE_MS"},
    {"heartbeat-ms", "LOOM_HEARTBEAT_MS"},
    {"max-queued-jobs", "LOOM_MAX_QUEUED_JOBS"},
    {"reclaim-grace-ms", "LOOM_RECLAIM_GRACE_MS"},
    {"tls-cert", "LOOM_TLS_CERT"},
    {"tls-key", "LOOM_TLS_KEY"},
    {"tls-client-ca", "LOOM_TLS_CLIENT_CA"},
    {"port-file", nullptr},
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

}  // namespace

const char kCoordinatorUsage[] = R"(usage: loom coordinator [flags]
(each flag also reads the environment variable shown)
Runs the coordinator daemon: job queue, scheduler, gRPC API (JobService, NodeService), /metrics.
  --data-dir DIR             LOOM_DATA_DIR (default $HOME/.loom): loom.db, logs, the user token
                             (token) and the agents' join token (join-token), both mode 0600
  --listen HOST:PORT         LOOM_LISTEN (default 127.0.0.1:7070)
  --metrics-listen HOST:PORT|off   LOOM_METRICS_LISTEN (default 127.0.0.1:7071)
  --run-root DIR             LOOM_RUN_ROOT (default <data-dir>/runs): run folders of jobs that
                             set no run_dir, <run-root>/<name>-<job id>
  --data-roots A,B           LOOM_DATA_ROOTS: folders jobs may read data and init_from from
  --allowed-roots A,B        LOOM_ALLOWED_ROOTS (default: the run root and the data roots):
                             every path of a job spec must resolve inside one of these
                             (symlinks followed; '..' always refused)
  --max-request-bytes N      LOOM_MAX_REQUEST_BYTES (default 4194304)
  --max-queued-jobs N        LOOM_MAX_QUEUED_JOBS (default 10000)
  --heartbeat-ms N           LOOM_HEARTBEAT_MS (default 1000); agents silent for 3 are lost
  --reclaim-grace-ms N       LOOM_RECLAIM_GRACE_MS (default 5000): after a restart, how long
                             agents have to reclaim running ranks (from when it listens)
  --kill-grace-ms N          LOOM_KILL_GRACE_MS (default 10000): SIGTERM -> SIGKILL of ranks
  --tls-cert PEM --tls-key PEM     LOOM_TLS_CERT, LOOM_TLS_KEY (TLS on)
  --tls-client-ca PEM        LOOM_TLS_CLIENT_CA (mutual TLS; binds agents to their certificate)
  --port-file PATH           write "<grpc port> <metrics port>" once listening
  --init                     start an empty job store although <data-dir>/store.marker says
                             loom.db existed (it is missing or empty); ids continue after the
                             old ones. No environment variable: it is meant for one start.
One coordinator per data folder (<data-dir>/lock) and per port.
Exit codes: 0 after SIGINT/SIGTERM, 1 when the server cannot start, 2 for bad flags.
)";

absl::StatusOr<CoordinatorFlags> ParseCoordinatorFlags(const std::vector<std::string>& args, const EnvLookup& env) {
  CoordinatorFlags out;
  std::map<std::string, std::string> v;
  for (const FlagDef& f : kFlags) {
    if (f.env == nullptr) continue;
    const char* e = env(f.env);
    if (e != nullptr && *e != '\0') v[f.flag] = e;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      return out;
    }
    if (a.rfind("--", 0) != 0) return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", a, "'"));
    std::string name = a.substr(2), value;
    if (name == "init") {  // a switch for one start; no environment variable on purpose
      out.server.coordinator.init = true;
      continue;
    }
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
    }
    bool known = false;
    for (const FlagDef& f : kFlags) known = known || name == f.flag;
    if (!known) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    v[name] = value;
  }
  ServerOptions& o = out.server;
  o.coordinator.data_dir = v.count("data-dir") ? v["data-dir"] : DefaultDataDir();
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
  o.tls_cert_file = v["tls-cert"];
  o.tls_key_file = v["tls-key"];
  o.tls_client_ca_file = v["tls-client-ca"];
  return out;
}

int RunCoordinatorCommand(const std::vector<std::string>& args) {
  auto flags = ParseCoordinatorFlags(args, [](const char* n) { return std::getenv(n); });
  if (!flags.ok()) {
    std::fprintf(stderr, "loom coordinator: %s\n%s", std::string(flags.status().message()).c_str(), kCoordinatorUsage);
    return 2;
  }
  if (flags->help) {
    std::fputs(kCoordinatorUsage, stdout);
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
  std::fprintf(stderr, "loom coordinator: listening on port %d (metrics port %d), data dir %s\n",
               (*server)->port(), (*server)->metrics_port(), flags->server.coordinator.data_dir.c_str());
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

}  // namespace loom::service
