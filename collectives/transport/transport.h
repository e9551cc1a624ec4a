// Transport: the point-to-point layer the shared collective algorithms run on.
//
// A Transport connects `size` ranks in a full mesh (through a Store) and moves
// tagged byte messages between pairs. Messages between one pair with one tag
// match in FIFO order; a receive must name the exact byte count that was sent.
// Tags are 48-bit (bits 48..63 must be zero; a transport may put the source
// rank there).
//
//   auto recv = t->IRecv(left, tag, buf, n);          // post before sending
//   LOOM_RETURN_IF_ERROR(t->Send(right, tag, data, n, deadline));
//   LOOM_RETURN_IF_ERROR((*recv)->Wait(deadline));
//
// Failure contract: a peer whose connection breaks fails every pending and
// later receive from it with Unavailable naming the rank; a receive that
// passes its deadline fails with DeadlineExceeded naming the rank and tag.
// After Abort(), every pending and later call fails with the abort reason;
// Abort returns only when no transport thread touches a user buffer any more,
// so callers may free their buffers after it (the backend aborts the transport
// whenever an op fails, since peers are then out of step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom::collectives::transport {

inline constexpr uint64_t kMaxTransportTag = (uint64_t{1} << 48) - 1;

class TransportRequest {
 public:
  virtual ~TransportRequest() = default;
  // Completes the request; on DeadlineExceeded the request stays pending and
  // the caller must Abort the transport before freeing the buffer.
  [[nodiscard]] virtual absl::Status Wait(absl::Time deadline) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual absl::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Starts sending n bytes to `peer`; the buffer must stay valid until Wait returns.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<TransportRequest>> ISend(
      int peer, uint64_t tag, const void* data, size_t n, absl::Time deadline) = 0;
  // Posts a receive of exactly n bytes from `peer`.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<TransportRequest>> IRecv(
      int peer, uint64_t tag, void* data, size_t n) = 0;
  virtual void Abort(const absl::Status& reason) = 0;

  // Blocking helpers.
  [[nodiscard]] absl::Status Send(int peer, uint64_t tag, const void* data, size_t n,
                                  absl::Time deadline);
  [[nodiscard]] absl::Status Recv(int peer, uint64_t tag, void* data, size_t n, absl::Time deadline);
};

}  // namespace loom::collectives::transport
