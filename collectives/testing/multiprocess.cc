#include "collectives/testing/multiprocess.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"

extern char** environ;

namespace loom::collectives::testing {
namespace {

std::map<std::string, WorkerFn>& Workers() {
  static auto* m = new std::map<std::string, WorkerFn>();
  return *m;
}

}  // namespace

bool RegisterWorker(const std::string& name, WorkerFn fn) {
  Workers()[name] = std::move(fn);
  return true;
}

bool MaybeRunWorker(int* rc) {
  const char* name = std::getenv("LOOM_COLL_WORKER");
  if (name == nullptr) return false;
  WorkerContext ctx;
  int deadline_s = 60;
  (void)absl::SimpleAtoi(std::getenv("LOOM_RANK"), &ctx.rank);
  (void)absl::SimpleAtoi(std::getenv("LOOM_WORLD_SIZE"), &ctx.world);
  (void)absl::SimpleAtoi(std::getenv("LOOM_COLL_DEADLINE_S"), &deadline_s);
  if (const char* a = std::getenv("LOOM_COLL_ARG")) ctx.arg = a;
  alarm(static_cast<unsigned>(deadline_s));  // a hung worker dies by SIGALRM
  auto it = Workers().find(name);
  if (it == Workers().end()) {
    fprintf(stderr, "unknown worker %s\n", name);
    *rc = 2;
    return true;
  }
  auto store = store::TcpStore::FromEnv();
  if (!store.ok()) {
    fprintf(stderr, "[rank %d] store: %s\n", ctx.rank, std::string(store.status().message()).c_str());
    *rc = 3;
    return true;
  }
  ctx.store = *store;
  int r = it->second(ctx);
  *rc = r != 0 ? r : (ctx.failures ? 1 : 0);
  fflush(stderr);
  fflush(stdout);
  return true;
}

bool RunResult::ok() const {
  if (timed_out) return false;
  for (int c : exit_codes) if (c != 0) return false;
  return true;
}

std::string RunResult::Summary() const {
  std::string s = timed_out ? "TIMED OUT; " : "";
  for (size_t i = 0; i < exit_codes.size(); ++i) absl::StrAppend(&s, "rank ", i, " -> ", exit_codes[i], "; ");
  return s;
}

RunResult RunRanks(const RunSpec& spec) {
  RunResult result;
  result.exit_codes.assign(spec.world, -1);
  store::StoreServer::Options so;
  so.secret = absl::StrCat("test-secret-", getpid());
  auto server = store::StoreServer::Start(so);
  if (!server.ok()) {
    fprintf(stderr, "store server: %s\n", std::string(server.status().message()).c_str());
    return result;
  }
  int deadline_s = static_cast<int>(absl::ToInt64Seconds(spec.deadline)) + 1;
  std::vector<pid_t> pids;
  for (int r = 0; r < spec.world; ++r) {
    // Build argv/envp before fork: the child only calls async-signal-safe functions.
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back(absl::StrCat("LOOM_COLL_WORKER=", spec.worker));
    env.push_back(absl::StrCat("LOOM_RANK=", r));
    env.push_back(absl::StrCat("LOOM_WORLD_SIZE=", spec.world));
    env.push_back(absl::StrCat("LOOM_STORE_ADDR=", (*server)->address()));
    env.push_back(absl::StrCat("LOOM_STORE_SECRET=", so.secret));
    env.push_back(absl::StrCat("LOOM_COLL_ARG=", spec.arg));
    env.push_back(absl::StrCat("LOOM_COLL_DEADLINE_S=", deadline_s));
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    char arg0[] = "collectives_worker";
    char* argv[] = {arg0, nullptr};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);
      execve("/proc/self/exe", argv, envp.data());
      _exit(98);
    }
    pids.push_back(pid);
  }
  std::shared_ptr<store::TcpStore> client;
  if (spec.controller) {
    auto c = store::TcpStore::Connect((*server)->address(), so.secret);
    if (c.ok()) {
      client = *c;
      spec.controller(*client, pids);
    }
  }
  absl::Time deadline = absl::Now() + spec.deadline;
  int remaining = spec.world;
  while (remaining > 0) {
    for (int r = 0; r < spec.world; ++r) {
      if (result.exit_codes[r] != -1) continue;
      int status;
      pid_t p = waitpid(pids[r], &status, WNOHANG);
      if (p == pids[r]) {
        result.exit_codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (absl::Now() > deadline) {
      result.timed_out = true;
      for (int r = 0; r < spec.world; ++r) {
        if (result.exit_codes[r] == -1) {
          kill(pids[r], SIGKILL);
          int status;
          waitpid(pids[r], &status, 0);
          result.exit_codes[r] = 128 + SIGKILL;
        }
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return result;
}

}  // namespace loom::collectives::testing
