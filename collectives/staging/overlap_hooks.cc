#include "collectives/staging/overlap_hooks.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::collectives::staging {

std::shared_ptr<const StageHooks> OverlapHooks::Hooks(absl::Time deadline, size_t piece_bytes) {
  auto h = std::make_shared<StageHooks>();
  h->piece_bytes = piece_bytes;
  std::shared_ptr<OverlapHooks> self = shared_from_this();
  h->need = [self](size_t o, size_t b) { self->Need(o, b); };
  h->ready = [self, deadline](size_t o, size_t b) { return self->Ready(o, b, deadline); };
  h->done = [self](size_t o, size_t b) { self->Done(o, b); };
  return h;
}

void OverlapHooks::IssueToHost(size_t offset, size_t bytes) {
  absl::StatusOr<std::unique_ptr<CopyEvent>> e = copier_->ToHost(host_ + offset, device_ + offset, bytes);
  if (!e.ok()) {
    if (error_.ok()) error_ = e.status();
    return;
  }
  loaded_[offset] = Piece{bytes, std::shared_ptr<CopyEvent>(std::move(*e))};
}

void OverlapHooks::Need(size_t offset, size_t bytes) {
  if (bytes == 0) return;
  absl::MutexLock l(&mu_);
  if (closed_) return;
  // An announced range that overlaps one already copied is left to Ready.
  auto next = loaded_.lower_bound(offset);
  if (next != loaded_.end() && next->first < offset + bytes) return;
  if (next != loaded_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > offset) return;
  IssueToHost(offset, bytes);
}

absl::Status OverlapHooks::Ready(size_t offset, size_t bytes, absl::Time deadline) {
  if (bytes == 0) return absl::OkStatus();
  std::vector<std::shared_ptr<CopyEvent>> waits;
  {
    absl::MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    if (closed_) return absl::FailedPreconditionError("cuda:gloo: the staged all_reduce has ended");
    // Copy the gaps no announced range covers, then wait for every piece
    // that overlaps [offset, offset + bytes).
    size_t at = offset;
    const size_t end = offset + bytes;
    auto it = loaded_.upper_bound(offset);
    if (it != loaded_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > offset) --it;
    std::vector<std::pair<size_t, size_t>> gaps;
    for (; it != loaded_.end() && it->first < end; ++it) {
      if (it->first > at) gaps.push_back({at, it->first - at});
      waits.push_back(it->second.event);
      at = std::max(at, it->first + it->second.bytes);
    }
    if (at < end) gaps.push_back({at, end - at});
    for (const auto& [o, b] : gaps) {
      IssueToHost(o, b);
      if (!error_.ok()) return error_;
      waits.push_back(loaded_[o].event);
    }
  }
  const absl::Time start = absl::Now();
  absl::Status s;
  for (const auto& e : waits) {
    s = e->Wait(deadline);
    if (!s.ok()) break;
  }
  absl::MutexLock l(&mu_);
  ready_wait_ += absl::Now() - start;
  if (!s.ok()) return Annotate(s, absl::StrCat("copy of bytes [", offset, ", ", offset + bytes, ") to the host"));
  return absl::OkStatus();
}

void OverlapHooks::Done(size_t offset, size_t bytes) {
  if (bytes == 0) return;
  absl::MutexLock l(&mu_);
  if (closed_) return;
  absl::Status s = copier_->ToDeviceQueued(device_ + offset, host_ + offset, bytes);
  if (!s.ok()) {
    if (error_.ok()) error_ = s;
    return;
  }
  stores_issued_ = true;
}

absl::Status OverlapHooks::Finish(absl::Time deadline) {
  std::vector<std::shared_ptr<CopyEvent>> loads;
  std::unique_ptr<CopyEvent> stores;  // after every copy back (one direction runs in issue order)
  absl::Status first;
  {
    absl::MutexLock l(&mu_);
    closed_ = true;  // an algorithm still running (it failed) issues no more copies
    first = error_;
    for (const auto& [offset, piece] : loaded_) loads.push_back(piece.event);
    if (stores_issued_) {
      absl::StatusOr<std::unique_ptr<CopyEvent>> fence = copier_->ToDeviceFence();
      if (fence.ok()) {
        stores = *std::move(fence);
      } else if (first.ok()) {
        first = fence.status();
      }
    }
  }
  // Every issued copy is waited for, also after an error or past the op's
  // deadline (copies always end, within a grace of 10 s): none may still
  // touch the host buffer or the caller's device memory once the op ends.
  const absl::Time grace = std::max(deadline, absl::Now() + absl::Seconds(10));
  for (const auto& e : loads) {
    absl::Status s = e->Wait(grace);
    if (first.ok() && !s.ok()) first = Annotate(s, "copy to host");
  }
  if (stores) {
    absl::Status s = stores->Wait(absl::Now() < deadline ? deadline : grace);
    if (first.ok() && !s.ok()) first = Annotate(s, "copy to device");
  }
  return first;
}

absl::Duration OverlapHooks::ready_wait() const {
  absl::MutexLock l(&mu_);
  return ready_wait_;
}

}  // namespace loom::collectives::staging
