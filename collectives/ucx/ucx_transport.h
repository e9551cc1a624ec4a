// UcxTransport: the Transport over UCX's UCP tag API (libucp).
//
// Setup: one ucp_context (UCP_FEATURE_TAG) and one worker per rank; worker
// addresses travel through the store ("ucx/<rank>"), then every rank creates
// an endpoint to every other. UCX picks the wire itself: shared memory
// (posix/sysv/cma) between processes of one host, TCP otherwise; UCX_TLS
// narrows it (e.g. UCX_TLS=tcp to measure the socket path).
//
// Matching: UCP receives match on the tag only, so the 64-bit UCP tag is
// (source rank << 48) | tag and receives use a full mask.
//
// Progress: there is no progress thread. Wait() drives ucp_worker_progress
// under the transport's mutex until the request completes or the deadline
// passes, spinning briefly and then yielding so that several ranks can share
// few cores. Endpoints use UCP_ERR_HANDLING_MODE_NONE, because PEER mode rules
// out UCX's shared-memory transports; a dead or stopped peer is therefore found
// by the op deadline (DeadlineExceeded naming the rank waited on), or by a
// transport error where UCX reports one. Abort() makes pending and later
// Waits return the abort reason at once (their requests are cancelled when
// dropped), so one failing channel of a sliced op stops the others.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "collectives/store/store.h"
#include "collectives/transport/transport.h"

namespace loom::collectives::ucx {

class UcxTransport : public transport::Transport {
 public:
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Connect(std::shared_ptr<store::Store> store, int rank, int size,
                                                               absl::Duration timeout);
  ~UcxTransport() override;

  absl::string_view name() const override { return "ucx"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::unique_ptr<transport::TransportRequest>> ISend(int peer, uint64_t tag, const void* data, size_t n,
                                                                     absl::Time deadline) override;
  absl::StatusOr<std::unique_ptr<transport::TransportRequest>> IRecv(int peer, uint64_t tag, void* data,
                                                                     size_t n) override;
  void Abort(const absl::Status& reason) override;

  struct Impl;

 private:
  UcxTransport(int rank, int size);
  int rank_, size_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::collectives::ucx
