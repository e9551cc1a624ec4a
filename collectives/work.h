// Work: the handle to one asynchronous collective (c10d's Work).
//
// A backend returns a Work as soon as the op is validated and queued; the op
// runs in the order it was issued (the same order on every rank). Semantics:
//
//   Wait(deadline):
//     block until completed or `deadline` passes
//     if completed:        return status()          // OK or the op's error
//     else:                return DeadlineExceeded   // the op keeps running; its own
//                                                    // timeout (options.timeout) still applies
//   IsCompleted():  return state in {succeeded, failed}
//   status():       pending -> Unavailable("pending"); else the final status
//   Abort():
//     if not started: complete with Cancelled, never run it
//     if running:     ask the backend to abort its communicator: the op (and every
//                     later op of that backend) fails with Cancelled
//     if completed:   no-op
//
// A failed op carries the error with context: op, sequence number, backend, and
// the peer rank where one is to blame. Tensors passed to the op must stay alive
// and untouched until the Work completes.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace loom::collectives {

class Work {
 public:
  Work() = default;
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  [[nodiscard]] absl::Status Wait(absl::Time deadline = absl::InfiniteFuture());
  [[nodiscard]] absl::Status WaitFor(absl::Duration d) { return Wait(absl::Now() + d); }
  bool IsCompleted();
  absl::Status status();
  void Abort();

  // ---- For backends ----
  // Marks the op as running. False if it was aborted before starting (skip it).
  bool Start();
  // Completes the op (first call wins).
  void Finish(absl::Status status);
  // Called by Abort() while running; set by the backend before queueing.
  void set_abort_hook(std::function<void()> hook);
  // Returns an already-completed Work.
  static std::shared_ptr<Work> Completed(absl::Status status);

 private:
  enum class State { kQueued, kRunning, kDone };
  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kQueued;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::function<void()> abort_hook_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom::collectives
