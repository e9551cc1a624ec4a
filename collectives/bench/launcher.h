// Launcher: runs N ranks of this very binary as processes on this host, with a
// StoreServer (127.0.0.1, random per-run secret) hosted by the launcher.
//
// Each child is fork+exec of /proc/self/exe with the launcher's own command
// line and these environment variables added:
//   LOOM_COLL_BENCH_WORKER=<role>   the hidden worker mode (what to run)
//   LOOM_RANK, LOOM_WORLD_SIZE, LOOM_STORE_ADDR, LOOM_STORE_SECRET
// so the binary's normal dispatch leads back to the code that launched it,
// which must check IsLaunchedWorker() first. The secret reaches children only
// through their environment, never their command line.
//
// Hang-proof: children get PR_SET_PDEATHSIG(SIGKILL) and alarm(deadline); the
// launcher SIGKILLs children that outlive the deadline and reports timed_out.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collectives/store/store.h"

namespace loom::collectives::bench {

struct LaunchSpec {
  std::string role;  // value of LOOM_COLL_BENCH_WORKER
  int world = 2;
  absl::Duration deadline = absl::Seconds(300);
  // Called every ~20 ms in the launcher while the ranks run, with a store
  // client (e.g. to stream results that rank 0 publishes).
  std::function<void(store::Store& store)> poll;
};

struct LaunchResult {
  std::vector<int> exit_codes;  // per rank: exit status, or 128 + signal
  bool timed_out = false;
  std::string error;            // the launcher itself failed (store, fork)
  bool ok() const;
  std::string Summary() const;
};

LaunchResult LaunchRanks(const LaunchSpec& spec);

// In a child: the role, or "" in the launcher / a normal run.
std::string LaunchedWorkerRole();

struct WorkerEnv {
  int rank = 0;
  int world = 1;
  std::shared_ptr<store::Store> store;
};
// In a child: arms alarm(deadline) and connects to the launcher's store.
absl::StatusOr<WorkerEnv> ConnectLaunchedWorker();

}  // namespace loom::collectives::bench
