// Multi-process test harness: runs N ranks of the test binary as separate
// processes over loopback, with a StoreServer hosted by the parent.
//
// The test binary's main() must start with
//   int rc;  if (loom::collectives::testing::MaybeRunWorker(&rc)) return rc;
// and workers are registered by name:
//   LOOM_COLLECTIVES_WORKER(matrix, [](WorkerContext& ctx) { ...; return 0; });
// A test then calls
//   RunResult r = RunRanks({.worker = "matrix", .world = 4, .arg = "cpu:tcp"});
//   EXPECT_TRUE(r.ok()) << r.Summary();
//
// No test can hang: every child gets alarm(deadline) and PR_SET_PDEATHSIG, and
// the parent SIGKILLs all children that outlive the deadline. Children are
// fork+exec'ed (/proc/self/exe), so they start single-threaded and clean.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collectives/store/store.h"

namespace loom::collectives::testing {

struct WorkerContext {
  int rank = 0;
  int world = 1;
  std::string arg;
  std::shared_ptr<store::Store> store;
  int failures = 0;
};
using WorkerFn = std::function<int(WorkerContext&)>;

bool RegisterWorker(const std::string& name, WorkerFn fn);
#define LOOM_COLLECTIVES_WORKER(name, fn) \
  static const bool loom_worker_##name = ::loom::collectives::testing::RegisterWorker(#name, fn)

// True (and *rc set) when this process is a worker child.
bool MaybeRunWorker(int* rc);

struct RunSpec {
  std::string worker;
  int world = 2;
  std::string arg;
  absl::Duration deadline = absl::Seconds(60);
  // Runs in the parent while the ranks run (fault injection): gets the store and pids.
  std::function<void(store::Store& store, const std::vector<pid_t>& pids)> controller;
};

struct RunResult {
  std::vector<int> exit_codes;  // per rank: exit status, or 128+signal
  bool timed_out = false;
  bool ok() const;
  std::string Summary() const;
};

RunResult RunRanks(const RunSpec& spec);

// Logs and counts a failed check inside a worker.
#define WORKER_EXPECT(ctx, cond, ...)                                                    \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      ++(ctx).failures;                                                                  \
      fprintf(stderr, "[rank %d] %s:%d: check failed: %s %s\n", (ctx).rank, __FILE__,   \
              __LINE__, #cond, ::absl::StrCat(__VA_ARGS__).c_str());                     \
    }                                                                                    \
  } while (0)

}  // namespace loom::collectives::testing
