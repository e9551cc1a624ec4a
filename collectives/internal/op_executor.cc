#include "collectives/internal/op_executor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/metrics.h"

namespace loom::collectives::internal {

OpExecutor::OpExecutor(OpExecutorOptions options)
    : options_(std::move(options)), dump_dir_(options_.flight_recorder_dir) {
  executor_ = std::thread([this] { ExecutorLoop(); });
}

OpExecutor::~OpExecutor() { Stop(); }

void OpExecutor::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  executor_.join();
  {
    absl::MutexLock l(&mu_);
    executor_done_ = true;
  }
  if (waiter_.joinable()) waiter_.join();
}

void OpExecutor::set_flight_recorder_dir(std::string dir) {
  absl::MutexLock l(&mu_);
  dump_dir_ = std::move(dir);
}

absl::StatusOr<std::shared_ptr<Work>> OpExecutor::Submit(const OpInfo& info, std::function<void()> abort_hook,
                                                         RunFn run, PostFn post) {
  if (info.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(OpTypeName(info.op), ": options.timeout: must be positive"));
  }
  auto work = std::make_shared<Work>();
  work->set_abort_hook(std::move(abort_hook));
  absl::MutexLock l(&mu_);
  if (stopping_) return absl::FailedPreconditionError("backend is shutting down");
  if (post && !waiter_.joinable()) waiter_ = std::thread([this] { WaiterLoop(); });
  const uint64_t seq = next_seq_++;
  const bool p2p = info.op == OpType::kSend || info.op == OpType::kRecv;
  const uint64_t tag_seq = p2p ? 0 : next_tag_seq_++;
  recorder_.Queued(seq, std::string(OpTypeName(info.op)), std::string(DTypeName(info.dtype)), info.numel);
  queue_.push_back(
      Task{work, info.op, seq, tag_seq, info.timeout, info.bytes, std::move(run), std::move(post), absl::Time()});
  return work;
}

void OpExecutor::ExecutorLoop() {
  while (true) {
    Task task;
    absl::Status failed;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](OpExecutor* e) ABSL_NO_THREAD_SAFETY_ANALYSIS { return e->stopping_ || !e->queue_.empty(); }, this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      failed = failed_;
    }
    if (!task.work->Start()) {
      recorder_.Finished(task.seq, absl::CancelledError("aborted before it started"));
      continue;
    }
    recorder_.Started(task.seq);
    task.started = absl::Now();
    if (failed.ok()) {
      Execute(task);
      continue;
    }
    absl::Status s = absl::FailedPreconditionError(absl::StrCat(options_.backend, " ", OpTypeName(task.op), " #",
                                                                task.seq, ": not run, an earlier op failed: ",
                                                                failed.message()));
    recorder_.Finished(task.seq, s);
    if (options_.count_ops_not_run) {
      GlobalCollectiveMetrics().Record(options_.backend, std::string(OpTypeName(task.op)), task.bytes,
                                       absl::Now() - task.started, false);
    }
    task.work->Finish(s);
  }
}

void OpExecutor::Execute(Task& task) {
  const absl::Time deadline = task.started + task.timeout;
  if (task.post) {
    absl::StatusOr<Completion> completion = task.post(task.tag_seq, deadline);
    if (!completion.ok()) {
      Fail(task, completion.status());
      return;
    }
    absl::MutexLock l(&mu_);
    posted_.push_back(Posted{std::move(task), std::move(*completion), deadline});
    return;
  }
  absl::Status s = task.run(task.tag_seq, deadline);
  if (!s.ok()) {
    Fail(task, s);
    return;
  }
  Complete(task);
}

void OpExecutor::WaiterLoop() {
  while (true) {
    Posted p;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](OpExecutor* e) ABSL_NO_THREAD_SAFETY_ANALYSIS { return e->executor_done_ || !e->posted_.empty(); },
          this));
      if (posted_.empty()) return;
      p = std::move(posted_.front());
      posted_.pop_front();
    }
    absl::Status s = p.completion(p.deadline);
    if (!s.ok()) {
      Fail(p.task, s);
      continue;
    }
    p.completion = nullptr;
    Complete(p.task);
  }
}

void OpExecutor::Complete(Task& task) {
  recorder_.Finished(task.seq, absl::OkStatus());
  GlobalCollectiveMetrics().Record(options_.backend, std::string(OpTypeName(task.op)), task.bytes,
                                   absl::Now() - task.started, true);
  task.work->Finish(absl::OkStatus());
}

void OpExecutor::Fail(Task& task, const absl::Status& s) {
  absl::Status e(s.code(), absl::StrCat(options_.backend, " ", OpTypeName(task.op), " #", task.seq, " on rank ",
                                        options_.rank, " (timeout ", absl::FormatDuration(task.timeout),
                                        "): ", s.message()));
  if (options_.describe_failure) e = options_.describe_failure(e);
  std::string dump_dir;
  {
    absl::MutexLock l(&mu_);
    if (failed_.ok()) failed_ = e;
    dump_dir = dump_dir_;
  }
  if (options_.abort) options_.abort(e);
  recorder_.Finished(task.seq, e);
  absl::Duration latency = options_.failure_latency ? absl::Now() - task.started : absl::ZeroDuration();
  GlobalCollectiveMetrics().Record(options_.backend, std::string(OpTypeName(task.op)), task.bytes, latency, false);
  if (!dump_dir.empty()) {
    (void)recorder_.DumpToFile(absl::StrCat(dump_dir, "/", options_.backend, ".rank", options_.rank, ".txt"));
  }
  task.work->Finish(e);
}

}  // namespace loom::collectives::internal
