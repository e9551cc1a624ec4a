// Registers backend "ucx": the shared algorithms over UcxTransport (UCP tag
// API; shared memory between processes of one host, TCP otherwise). UCX has
// no native collectives here: every op runs the shared algorithms.
#include "base/status.h"
#include "collectives/algorithm_backend.h"
#include "collectives/ucx/ucx_transport.h"

namespace loom::collectives::ucx {
namespace {

absl::StatusOr<std::shared_ptr<Backend>> MakeUcxBackend(const BackendContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto t, UcxTransport::Connect(ctx.store, ctx.rank, ctx.size, ctx.timeout));
  // One UCX context + worker per channel: each channel's thread drives its own
  // shared-memory copies (channels.h).
  LOOM_ASSIGN_OR_RETURN(
      auto extra, ConnectExtraChannels(
                      ctx.store, ctx.rank, ctx.size, ctx.timeout, ChannelOptionsOf(ctx),
                      [&](std::shared_ptr<store::Store> s) -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
                        return UcxTransport::Connect(s, ctx.rank, ctx.size, ctx.timeout);
                      }));
  auto b = std::make_shared<AlgorithmBackend>("ucx", std::move(t));
  b->SetChannels(std::move(extra));
  b->Configure(ctx);
  return std::shared_ptr<Backend>(b);
}

const bool kRegistered = RegisterBackend("ucx", MakeUcxBackend);

}  // namespace
}  // namespace loom::collectives::ucx
