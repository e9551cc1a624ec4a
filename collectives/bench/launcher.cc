#include "collectives/bench/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"

extern char** environ;

namespace loom::collectives::bench {
namespace {

constexpr char kRoleVar[] = "LOOM_COLL_BENCH_WORKER";
constexpr char kDeadlineVar[] = "LOOM_COLL_BENCH_DEADLINE_S";

std::string RandomSecret() {
  unsigned char b[16] = {};
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, b, sizeof(b)) != static_cast<ssize_t>(sizeof(b))) b[0] ^= 1;
    close(fd);
  }
  std::string s;
  for (unsigned char c : b) absl::StrAppend(&s, absl::Hex(c, absl::kZeroPad2));
  return absl::StrCat(s, getpid());
}

std::vector<std::string> OwnCommandLine() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string all = ss.str();
  std::vector<std::string> argv;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      argv.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  if (argv.empty()) argv.push_back("loom");
  return argv;
}

}  // namespace

bool LaunchResult::ok() const {
  if (timed_out || !error.empty() || exit_codes.empty()) return false;
  for (int c : exit_codes) if (c != 0) return false;
  return true;
}

std::string LaunchResult::Summary() const {
  std::string s = error.empty() ? "" : absl::StrCat(error, "; ");
  if (timed_out) absl::StrAppend(&s, "TIMED OUT; ");
  for (size_t i = 0; i < exit_codes.size(); ++i) {
    absl::StrAppend(&s, "rank ", i, " exit ", exit_codes[i], i + 1 < exit_codes.size() ? ", " : "");
  }
  return s;
}

std::string LaunchedWorkerRole() {
  const char* r = std::getenv(kRoleVar);
  return r ? r : "";
}

absl::StatusOr<WorkerEnv> ConnectLaunchedWorker() {
  WorkerEnv w;
  int deadline_s = 300;
  const char* rank = std::getenv("LOOM_RANK");
  const char* world = std::getenv("LOOM_WORLD_SIZE");
  if (!rank || !world || !absl::SimpleAtoi(rank, &w.rank) || !absl::SimpleAtoi(world, &w.world)) {
    return absl::InvalidArgumentError("worker: LOOM_RANK / LOOM_WORLD_SIZE missing");
  }
  if (const char* d = std::getenv(kDeadlineVar)) (void)absl::SimpleAtoi(d, &deadline_s);
  alarm(static_cast<unsigned>(deadline_s));  // a hung rank dies by SIGALRM
  auto store = store::TcpStore::FromEnv();
  if (!store.ok()) return store.status();
  w.store = *store;
  return w;
}

LaunchResult LaunchRanks(const LaunchSpec& spec) {
  LaunchResult result;
  result.exit_codes.assign(spec.world, -1);
  store::StoreServer::Options so;
  so.secret = RandomSecret();
  auto server = store::StoreServer::Start(so);
  if (!server.ok()) {
    result.error = absl::StrCat("store server: ", server.status().message());
    return result;
  }
  int deadline_s = static_cast<int>(absl::ToInt64Seconds(spec.deadline)) + 2;
  std::vector<std::string> args = OwnCommandLine();
  std::vector<pid_t> pids;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < spec.world; ++r) {
    // argv/envp are built before fork: the child only calls async-signal-safe functions.
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      absl::string_view v(*e);
      if (v.rfind("LOOM_RANK=", 0) == 0 || v.rfind("LOOM_WORLD_SIZE=", 0) == 0 ||
          v.rfind("LOOM_STORE_", 0) == 0 || v.rfind(kRoleVar, 0) == 0) {
        continue;
      }
      env.emplace_back(*e);
    }
    env.push_back(absl::StrCat(kRoleVar, "=", spec.role));
    env.push_back(absl::StrCat("LOOM_RANK=", r));
    env.push_back(absl::StrCat("LOOM_WORLD_SIZE=", spec.world));
    env.push_back(absl::StrCat("LOOM_STORE_ADDR=", (*server)->address()));
    env.push_back(absl::StrCat("LOOM_STORE_SECRET=", so.secret));
    env.push_back(absl::StrCat(kDeadlineVar, "=", deadline_s));
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
      result.error = "fork failed";
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);
      execve("/proc/self/exe", argv.data(), envp.data());
      _exit(98);
    }
    pids.push_back(pid);
  }
  std::shared_ptr<store::TcpStore> client;
  if (spec.poll) {
    auto c = store::TcpStore::Connect((*server)->address(), so.secret);
    if (c.ok()) client = *c;
  }
  absl::Time deadline = absl::Now() + spec.deadline;
  int remaining = static_cast<int>(pids.size());
  while (remaining > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (result.exit_codes[r] != -1) continue;
      int status;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        result.exit_codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --remaining;
      }
    }
    if (client) spec.poll(*client);
    if (remaining == 0) break;
    if (absl::Now() > deadline) {
      result.timed_out = true;
      for (size_t r = 0; r < pids.size(); ++r) {
        if (result.exit_codes[r] != -1) continue;
        kill(pids[r], SIGKILL);
        int status;
        waitpid(pids[r], &status, 0);
        result.exit_codes[r] = 128 + SIGKILL;
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return result;
}

}  // namespace loom::collectives::bench
