// A real Slurm cluster for tests: munged, slurmctld and N slurmd (Debian's
// multiple-slurmd build: nodes n1..nN on this host, each on its own loopback
// port) in a fresh folder under /tmp, as root, with short timeouts. Nothing is
// mocked; a missing binary is a test failure that names it (scripts/setup.sh
// installs slurmctld, slurmd, slurm-client and munge).
//
// The fixture sets SLURM_CONF in this process, so every Slurm client the test
// runs (srun, sbatch, squeue, scancel), and `loom` under them, talks to it.
// Nodes have the CPUs the options say, whatever this host has
// (SlurmdParameters=config_overrides). Short timeouts: SlurmdTimeout and
// KillWait (options), credentials that
// expire in 10 s (a requeued job waits that long before it may start again)
// and a main scheduling pass every 2 s.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testing/loom_cli.h"

namespace loom::tests::slurm {

struct SlurmClusterOptions {
  int nodes = 2;
  int cpus_per_node = 2;  // as configured (config_overrides: may exceed this host's)
  int slurmd_timeout_s = 5;  // SlurmdTimeout: how soon a silent node is DOWN
  int kill_wait_s = 2;       // KillWait: SIGTERM to SIGKILL on scancel
  int start_timeout_s = 30;  // until every node is idle
};

class SlurmCluster {
 public:
  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start(const SlurmClusterOptions& o = {}) {
    std::unique_ptr<SlurmCluster> c(new SlurmCluster(o));
    if (absl::Status s = c->Boot(); !s.ok()) return s;
    return c;
  }
  ~SlurmCluster() { Stop(); }

  const std::string& dir() const { return dir_; }
  const std::vector<pid_t>& daemon_pids() const { return pids_; }
  std::string node(int i) const { return absl::StrCat("n", i + 1); }

  // A Slurm client command (srun, sbatch, ...) bounded by `timeout_s`.
  testing::CliResult Run(const std::string& cmd, int timeout_s = 60) const {
    return testing::Shell(absl::StrCat("timeout ", timeout_s, " ", cmd));
  }
  // Node i's state as `sinfo` sees it ("idle", "mixed", "down*", ...).
  std::string NodeState(int i) const {
    testing::CliResult r = Run(absl::StrCat("sinfo -h -N -n ", node(i), " -o %T"), 10);
    std::string s = r.output;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
  // The job's state as `squeue` sees it ("" once Slurm has forgotten it).
  std::string JobState(const std::string& job_id) const {
    testing::CliResult r = Run(absl::StrCat("squeue -h -o %T -j ", job_id), 10);
    std::string s = r.output;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return r.code == 0 ? s : "";
  }

  // Cancels every job, then stops the daemons (SIGTERM, SIGKILL after 5 s).
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    if (!pids_.empty()) (void)Run("scancel --full --quiet --user=root", 10);
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it)
      if (*it > 0) kill(*it, SIGTERM);
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it)
      if (*it > 0) Reap(*it, 5);
    pids_.clear();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // Stops munged (SIGTERM; its socket goes with it) or slurmctld, for tests
  // of what Slurm's clients and Loom say without them.
  void StopMunge() { StopDaemon(0); }
  void StopController() { StopDaemon(1); }
  std::string munge_socket() const { return dir_ + "/munge.sock"; }

  // Stops node i's slurmd with SIGKILL (a node failure); Restart brings it back.
  void KillNode(int i) {
    kill(slurmd_[i], SIGKILL);
    Reap(slurmd_[i], 5);
  }
  void RestartNode(int i) { slurmd_[i] = Track(Daemon({"/usr/sbin/slurmd", "-D", "-N", node(i)}, node(i))); }

 private:
  explicit SlurmCluster(SlurmClusterOptions o) : o_(o) {}

  // pids_[i] (0: munged, 1: slurmctld) stopped and reaped; Stop skips it.
  void StopDaemon(size_t i) {
    if (i >= pids_.size() || pids_[i] <= 0) return;
    kill(pids_[i], SIGTERM);
    Reap(pids_[i], 5);
    pids_[i] = -1;
  }

  static void Reap(pid_t pid, int seconds) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    int st = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &st, WNOHANG) != 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }

  // A free loopback TCP port (bound, read back, released).
  static int FreePort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    close(fd);
    return port;
  }

  pid_t Track(pid_t pid) {
    pids_.push_back(pid);
    return pid;
  }

  // fork + exec with stdout and stderr to <dir>/log/<name>.out.
  pid_t Daemon(const std::vector<std::string>& argv, const std::string& name) {
    const std::string log = absl::StrCat(dir_, "/log/", name, ".out");
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      FILE* f = freopen(log.c_str(), "a", stdout);
      f = freopen(log.c_str(), "a", stderr);
      (void)f;
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    return pid;
  }

  static absl::Status CheckBinaries() {
    std::vector<std::string> missing;
    for (const char* b : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/srun",
                          "/usr/bin/sbatch", "/usr/bin/squeue", "/usr/bin/scancel", "/usr/bin/scontrol",
                          "/usr/bin/sinfo"})
      if (access(b, X_OK) != 0) missing.push_back(b);
    if (missing.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("Slurm test cluster: missing ", absl::StrJoin(missing, ", "),
                                                      " (scripts/setup.sh installs slurmctld slurmd slurm-client munge)"));
  }

  std::string Config(int ctld_port, const std::vector<int>& node_ports) const {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::string c = absl::StrCat(
        "ClusterName=loomtest\nSlurmctldHost=", host, "(127.0.0.1)\nSlurmctldPort=", ctld_port,
        "\nAuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=", dir_, "/munge.sock,cred_expire=10\n",
        "SlurmUser=root\nSlurmdUser=root\nStateSaveLocation=", dir_, "/state\nSlurmdSpoolDir=", dir_,
        "/spool/%n\nSlurmctldPidFile=", dir_, "/slurmctld.pid\nSlurmdPidFile=", dir_, "/slurmd-%n.pid\n",
        "SlurmctldLogFile=", dir_, "/log/slurmctld.log\nSlurmdLogFile=", dir_, "/log/slurmd-%n.log\n",
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n",
        "SelectTypeParameters=CR_CPU\nSchedulerType=sched/builtin\nAccountingStorageType=accounting_storage/none\n",
        "JobCompType=jobcomp/none\nMpiDefault=none\nReturnToService=2\nSlurmdParameters=config_overrides\n",
        "SlurmdTimeout=", o_.slurmd_timeout_s,
        "\nSlurmctldTimeout=5\nMessageTimeout=5\nInactiveLimit=0\nKillWait=", o_.kill_wait_s,
        "\nMinJobAge=300\nSchedulerParameters=sched_interval=2\n");
    std::vector<std::string> names;
    for (int i = 0; i < o_.nodes; ++i) {
      absl::StrAppend(&c, "NodeName=", node(i), " NodeHostname=", host, " NodeAddr=127.0.0.1 Port=", node_ports[i],
                      " CPUs=", o_.cpus_per_node, " State=UNKNOWN\n");
      names.push_back(node(i));
    }
    absl::StrAppend(&c, "PartitionName=debug Nodes=", absl::StrJoin(names, ","),
                    " Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n");
    return c;
  }

  absl::Status Boot() {
    if (absl::Status s = CheckBinaries(); !s.ok()) return s;
    // Under /tmp, not TEST_TMPDIR: munge's socket path must fit in sun_path.
    char tmpl[] = "/tmp/loom-slurm-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return absl::InternalError("cannot create a folder under /tmp");
    dir_ = tmpl;
    chmod(dir_.c_str(), 0755);
    namespace fs = std::filesystem;
    for (const char* d : {"state", "log", "spool"}) fs::create_directories(dir_ + "/" + d);
    for (int i = 0; i < o_.nodes; ++i) fs::create_directories(dir_ + "/spool/" + node(i));
    {
      std::ofstream key(dir_ + "/munge.key", std::ios::binary);
      std::mt19937_64 rng(std::random_device{}());
      for (int i = 0; i < 1024; ++i) key.put(static_cast<char>(rng() & 0xff));
    }
    chmod((dir_ + "/munge.key").c_str(), 0400);
    std::vector<int> ports;
    for (int i = 0; i < o_.nodes; ++i) ports.push_back(FreePort());
    const int ctld_port = FreePort();
    std::ofstream(dir_ + "/slurm.conf") << Config(ctld_port, ports);
    setenv("SLURM_CONF", (dir_ + "/slurm.conf").c_str(), 1);
    Track(Daemon({"/usr/sbin/munged", "-F", "--force", "-S", dir_ + "/munge.sock", "--key-file=" + dir_ + "/munge.key",
                  "--pid-file=" + dir_ + "/munged.pid", "--log-file=" + dir_ + "/log/munged.log",
                  "--seed-file=" + dir_ + "/munge.seed"},
                 "munged"));
    if (!WaitFor([&] { return fs::exists(dir_ + "/munge.sock"); }))
      return Failed("munged did not create its socket", "munged");
    Track(Daemon({"/usr/sbin/slurmctld", "-D", "-c"}, "slurmctld"));
    for (int i = 0; i < o_.nodes; ++i)
      slurmd_.push_back(Track(Daemon({"/usr/sbin/slurmd", "-D", "-N", node(i)}, node(i))));
    if (!WaitFor([&] { return IdleNodes() == o_.nodes; }))
      return Failed(absl::StrCat("only ", IdleNodes(), " of ", o_.nodes, " nodes became idle"), "slurmctld");
    return absl::OkStatus();
  }

  int IdleNodes() const {
    testing::CliResult r = Run("sinfo -h -N -t idle -o %N", 5);
    if (r.code != 0) return 0;
    int n = 0;
    for (char ch : r.output) n += ch == '\n';
    return n;
  }

  template <typename F>
  bool WaitFor(F ready) const {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o_.start_timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ready()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // A start failure with the end of the daemon's log.
  absl::Status Failed(const std::string& what, const std::string& log) const {
    std::ifstream in(absl::StrCat(dir_, "/log/", log, ".out"));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    return absl::UnavailableError(absl::StrCat("Slurm test cluster: ", what, "; ", log, " said:\n", text));
  }

  SlurmClusterOptions o_;
  std::string dir_;
  std::vector<pid_t> pids_;
  std::vector<pid_t> slurmd_;
  bool stopped_ = false;
};

}  // namespace loom::tests::slurm
