// OpExecutor: the queue and threads behind a backend's asynchronous ops, with
// the Work, failure, flight-recorder and metrics handling every backend shares
// (AlgorithmBackend for tcp/gloo/ucx, StagedBackend for cuda:gloo).
//
// Submit() validates the timeout, records the op as queued and returns its
// Work; one executor thread runs the ops in issue order:
//
//   pop op; snapshot failed
//   if !work.Start():  recorder: Cancelled "aborted before it started"; next
//   recorder: started; deadline = now + timeout
//   if failed:  FailedPrecondition "<backend> <op> #<seq>: not run, an earlier
//               op failed: <first error>"                      (no run, no hooks)
//   run(tag_seq, deadline)                    -- blocking ops, on this thread
//   or post(tag_seq, deadline) -> completion  -- point-to-point: posted in issue
//               order, completion(deadline) waited on the waiter thread, so
//               later ops are not held back
//   error -> Fail, else recorder ok, metrics ok, work.Finish(OK)
//
//   Fail(op, s):  e = "<backend> <op> #<seq> on rank <r> (timeout <t>): <s>"
//                 e = describe_failure(e)      (e.g. quote other ranks' errors)
//                 the first such e fails every later op (see above)
//                 abort(e)                     (e.g. abort the transport)
//                 recorder failed, metrics failure, dump the recorder to
//                 "<dir>/<backend>.rank<r>.txt" when a dir is set, work.Finish(e)
//
// seq numbers every op in issue order (the flight recorder's and the error's
// "#<seq>"); tag_seq, what run and post get, numbers the collective ops only
// (send and recv take none), so ranks that ran different point-to-point ops
// still agree on the tags of the collectives after them.
//
// Stop() (also run by the destructor) refuses new ops, lets the executor
// drain the queue, then the waiter drain the posted ops. A backend whose run
// functions use its own members calls Stop() first in its destructor.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/dtype.h"
#include "collectives/flight_recorder.h"
#include "collectives/types.h"
#include "collectives/work.h"

namespace loom::collectives::internal {

struct OpExecutorOptions {
  std::string backend;  // in error messages, metrics and the dump file name
  int rank = 0;
  std::string flight_recorder_dir;  // "" = never dump
  // Returns the error to record for a failed op, given the one built above.
  std::function<absl::Status(const absl::Status&)> describe_failure;
  // Called for each failed op once the backend is marked failed, before the
  // op's Work completes.
  std::function<void(const absl::Status&)> abort;
  // Metrics of ops that do not succeed: an op not run because an earlier op
  // failed counts as a failure (else it is not recorded), and a failed op's
  // latency is the time it ran (else zero).
  bool count_ops_not_run = false;
  bool failure_latency = true;
};

// What the metrics and the flight recorder say about one op.
struct OpInfo {
  OpType op;
  DType dtype;
  int64_t numel = 0;
  int64_t bytes = 0;  // bytes for the metrics
  absl::Duration timeout;
};

class OpExecutor {
 public:
  // Runs an op to completion on the executor thread.
  using RunFn = std::function<absl::Status(uint64_t tag_seq, absl::Time deadline)>;
  // Waits for a posted op until the deadline.
  using Completion = std::function<absl::Status(absl::Time deadline)>;
  // Posts an op on the executor thread; its completion runs on the waiter.
  using PostFn = std::function<absl::StatusOr<Completion>(uint64_t tag_seq, absl::Time deadline)>;

  explicit OpExecutor(OpExecutorOptions options);
  ~OpExecutor();
  OpExecutor(const OpExecutor&) = delete;
  OpExecutor& operator=(const OpExecutor&) = delete;

  // Queues an op (exactly one of run and post set). InvalidArgument
  // "<op>: options.timeout: must be positive"; FailedPrecondition
  // "backend is shutting down" after Stop().
  absl::StatusOr<std::shared_ptr<Work>> Submit(const OpInfo& info, std::function<void()> abort_hook, RunFn run,
                                               PostFn post = nullptr);
  void Stop();

  FlightRecorder* recorder() { return &recorder_; }
  void set_flight_recorder_dir(std::string dir);

 private:
  struct Task {
    std::shared_ptr<Work> work;
    OpType op;
    uint64_t seq = 0;
    uint64_t tag_seq = 0;
    absl::Duration timeout;
    int64_t bytes = 0;
    RunFn run;
    PostFn post;
    absl::Time started;
  };
  struct Posted {
    Task task;
    Completion completion;
    absl::Time deadline;
  };
  void ExecutorLoop();
  void WaiterLoop();
  // Runs (or posts) a started op whose backend has not failed.
  void Execute(Task& task);
  void Complete(Task& task);
  void Fail(Task& task, const absl::Status& s);

  const OpExecutorOptions options_;
  FlightRecorder recorder_;
  absl::Mutex mu_;
  std::string dump_dir_ ABSL_GUARDED_BY(mu_);
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Posted> posted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool executor_done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_tag_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  std::thread executor_;
  std::thread waiter_;  // started with the first posted op
};

}  // namespace loom::collectives::internal
