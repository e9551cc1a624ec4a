// Registers backend "tcp": the shared algorithms over TcpTransport. It needs
// no library beyond sockets, so it is the reference every other backend is
// compared with. Large all_reduces run over several connections at once
// (channels.h).
#include "base/status.h"
#include "collectives/algorithm_backend.h"
#include "collectives/transport/tcp_transport.h"

namespace loom::collectives {
namespace {

static_assert(kAutomatic == internal::kAutoSocketBuffer);  // tcp_socket_buffer_bytes

absl::StatusOr<std::shared_ptr<Backend>> MakeTcpBackend(const BackendContext& ctx) {
  transport::TcpTransport::Options o;
  o.host = CollectivesHost();
  o.timeout = ctx.timeout;
  o.socket_buffer_bytes = ctx.tcp_socket_buffer_bytes;
  LOOM_ASSIGN_OR_RETURN(auto t, transport::TcpTransport::Connect(ctx.store, ctx.rank, ctx.size, o));
  LOOM_ASSIGN_OR_RETURN(
      auto extra, ConnectExtraChannels(
                      ctx.store, ctx.rank, ctx.size, ctx.timeout, ChannelOptionsOf(ctx),
                      [&](std::shared_ptr<store::Store> s) -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
                        return transport::TcpTransport::Connect(s, ctx.rank, ctx.size, o);
                      }));
  auto b = std::make_shared<AlgorithmBackend>("tcp", std::move(t));
  b->SetChannels(std::move(extra));
  b->Configure(ctx);
  return std::shared_ptr<Backend>(b);
}

const bool kRegistered = RegisterBackend("tcp", MakeTcpBackend);

}  // namespace
}  // namespace loom::collectives
