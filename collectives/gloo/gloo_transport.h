// GlooTransport: our Transport over a connected gloo::Context, using Gloo's
// unbound buffers (send/recv by (rank, slot)); the slot is our 48-bit tag.
// The Gloo backend runs the shared algorithms over it for the ops and dtypes
// libgloo lacks (bf16 and bool reductions, reduce-scatter, uneven gather and
// scatter) and for send/recv.
//
// Gloo reports failures by exceptions; every call here catches them and
// returns DeadlineExceeded (gloo timeouts) or Unavailable (I/O errors).
// Abort() only marks the transport failed: libgloo cannot cancel in-flight
// pair operations, so it relies on Gloo dropping data for destroyed buffers.
#pragma once

#include <atomic>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "collectives/transport/transport.h"

namespace gloo { class Context; }

namespace loom::collectives::gloo {

class GlooTransport : public transport::Transport {
 public:
  explicit GlooTransport(std::shared_ptr<::gloo::Context> context);
  absl::string_view name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::unique_ptr<transport::TransportRequest>> ISend(int peer, uint64_t tag, const void* data, size_t n,
                                                                     absl::Time deadline) override;
  absl::StatusOr<std::unique_ptr<transport::TransportRequest>> IRecv(int peer, uint64_t tag, void* data,
                                                                     size_t n) override;
  void Abort(const absl::Status& reason) override;
  absl::Status aborted();

 private:
  std::shared_ptr<::gloo::Context> context_;
  int rank_, size_;
  absl::Mutex mu_;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

// Converts a caught Gloo exception message into a Status.
absl::Status GlooError(absl::string_view what, const std::exception& e);

}  // namespace loom::collectives::gloo
