#include "collectives/transport/transport.h"

namespace loom::collectives::transport {

absl::Status Transport::Send(int peer, uint64_t tag, const void* data, size_t n,
                             absl::Time deadline) {
  auto r = ISend(peer, tag, data, n, deadline);
  if (!r.ok()) return r.status();
  return (*r)->Wait(deadline);
}

absl::Status Transport::Recv(int peer, uint64_t tag, void* data, size_t n, absl::Time deadline) {
  auto r = IRecv(peer, tag, data, n);
  if (!r.ok()) return r.status();
  return (*r)->Wait(deadline);
}

}  // namespace loom::collectives::transport
