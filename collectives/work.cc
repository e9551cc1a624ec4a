#include "collectives/work.h"

namespace loom::collectives {

absl::Status Work::Wait(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ == State::kDone; };
  while (!done()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("Work::Wait: deadline passed before the op completed");
    }
    mu_.AwaitWithDeadline(absl::Condition(+[](State* s) { return *s == State::kDone; }, &state_),
                          deadline);
  }
  return status_;
}

bool Work::IsCompleted() {
  absl::MutexLock l(&mu_);
  return state_ == State::kDone;
}

absl::Status Work::status() {
  absl::MutexLock l(&mu_);
  if (state_ != State::kDone) return absl::UnavailableError("pending");
  return status_;
}

void Work::Abort() {
  std::function<void()> hook;
  {
    absl::MutexLock l(&mu_);
    if (state_ == State::kQueued) {
      state_ = State::kDone;
      status_ = absl::CancelledError("aborted before it started");
      return;
    }
    if (state_ == State::kDone) return;
    hook = abort_hook_;
  }
  if (hook) hook();
}

bool Work::Start() {
  absl::MutexLock l(&mu_);
  if (state_ != State::kQueued) return false;
  state_ = State::kRunning;
  return true;
}

void Work::Finish(absl::Status status) {
  absl::MutexLock l(&mu_);
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  status_ = std::move(status);
}

void Work::set_abort_hook(std::function<void()> hook) {
  absl::MutexLock l(&mu_);
  abort_hook_ = std::move(hook);
}

std::shared_ptr<Work> Work::Completed(absl::Status status) {
  auto w = std::make_shared<Work>();
  w->Start();
  w->Finish(std::move(status));
  return w;
}

}  // namespace loom::collectives
