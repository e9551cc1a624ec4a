// OverlapHooks: the StageHooks (collectives/types.h) a staged all_reduce
// hands its inner backend, so that the copies overlap the algorithm instead
// of running before and after it.
//
//   need(range)   issues the copy of that device range to the host buffer
//                 (the algorithm announces every range first, in the order
//                 it will read them, so the copy engine works ahead of it);
//   ready(range)  waits for the copies covering it (copying first what was
//                 never announced);
//   done(range)   issues the copy of that host range back to the device
//                 (without an event: Finish waits for every copy back
//                 behind one fence).
//
// Finish() waits for every copy issued, and no copy is issued after it. The
// hooks may be called from several threads (one per channel of the inner
// backend).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectives/staging/copier.h"
#include "collectives/types.h"

namespace loom::collectives::staging {

class OverlapHooks : public std::enable_shared_from_this<OverlapHooks> {
 public:
  // `device` and `host` are the op's buffers (the same length); `copier`
  // outlives the op.
  OverlapHooks(Copier* copier, char* device, char* host) : copier_(copier), device_(device), host_(host) {}

  // The StageHooks over this object, whose ready() waits until `deadline`,
  // asking for pieces of `piece_bytes`.
  std::shared_ptr<const StageHooks> Hooks(absl::Time deadline, size_t piece_bytes);

  void Need(size_t offset, size_t bytes);
  absl::Status Ready(size_t offset, size_t bytes, absl::Time deadline);
  void Done(size_t offset, size_t bytes);
  // Waits for every copy issued, the copies back by `deadline`; the first
  // error of any copy. Call it once the algorithm has ended, also when it
  // failed.
  absl::Status Finish(absl::Time deadline);

  // Summed over the calling threads: time blocked in Ready.
  absl::Duration ready_wait() const;

 private:
  struct Piece {
    size_t bytes;
    std::shared_ptr<CopyEvent> event;
  };
  // Issues the copy of [offset, offset + bytes) to the host (mu_ held).
  void IssueToHost(size_t offset, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Copier* copier_;
  char* device_;
  char* host_;
  mutable absl::Mutex mu_;
  std::map<size_t, Piece> loaded_ ABSL_GUARDED_BY(mu_);  // by offset; ranges never overlap
  bool stores_issued_ ABSL_GUARDED_BY(mu_) = false;  // Finish waits for them behind one fence
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // Finish ran: no copy is issued after it
  absl::Duration ready_wait_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom::collectives::staging
