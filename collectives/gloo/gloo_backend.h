// Backend "gloo": Debian's libgloo over its TCP transport.
//
// Rendezvous: gloo::rendezvous::Context::connectFullMesh through a
// gloo::rendezvous::Store adapter over our Store (keys under the group's prefix).
//
// Native Gloo algorithms (chosen here):
//   all_reduce   f32/f64/f16/i32/i64: gloo::allreduce, BCUBE (halving-doubling
//                style, log steps) below 256 KiB, RING above
//   broadcast, all_gather(v), all_to_all(v), barrier: any dtype (moved as bytes)
//   reduce       f32/f64/f16/i32/i64: gloo::reduce
// Native Gloo runs only from kNativeMinBytes up (the message, or the larger
// all_to_all side). Below that, and for everything libgloo lacks (bf16 and bool
// reductions, reduce-scatter, gather and scatter, send/recv, barrier), the
// shared algorithms run over Loom's TcpTransport, a second full mesh made at
// Create, so every op covers every dtype.
//
// Why: libgloo's TCP device loop spins on epoll while a pair's lock is taken
// (Pair::handleEvents try-locks and retries at once), so on a machine with few
// cores, messages bounce through preempted threads: 2.3-5 ms per 1 KiB
// all_reduce on the 2-core development machine against 0.1-0.5 ms for the
// shared algorithms over TcpTransport (`loom bench collectives`), and the
// shared ring over TCP also beat Gloo's from 1 to 16 MiB there (and on the
// 16-core GPU host up to 16 MiB). From 64 MiB Gloo's ring is as fast or
// faster (2.0 vs 1.3 GB/s busbw at 256 MiB on the 16-core host), so it takes
// over at kNativeMinBytes -- unless the backend has several channels
// (collectives/channels.h: extra TcpTransports, one thread each; the default
// where there are >= 4 usable CPUs per rank): then a large all_reduce runs
// as one ring slice per channel, several cores per rank copying and reducing,
// at every size. BackendContext::gloo_native_min_bytes
// (ProcessGroupOptions) moves Gloo's takeover point for every op (for A/B
// runs); gloo_transport "gloo" puts everything on Gloo (native algorithms at
// every size, the shared ones over Gloo's unbound buffers, GlooTransport, one
// channel).
//
// gather/scatter stay on the shared direct algorithm because only the root
// knows every rank's size, while gloo::gather/scatter need equal sizes agreed
// by all ranks.
#pragma once

#include <cstdint>
#include <memory>

#include "collectives/algorithm_backend.h"

namespace gloo { class Context; }

namespace loom::collectives::gloo {

class GlooBackend : public AlgorithmBackend {
 public:
  static absl::StatusOr<std::shared_ptr<Backend>> Create(const BackendContext& ctx);
  // `transport` carries the shared algorithms; native Gloo runs for messages
  // of at least `native_min_bytes` (0: always).
  GlooBackend(std::shared_ptr<::gloo::Context> context, std::unique_ptr<transport::Transport> transport,
              size_t native_min_bytes);
  ~GlooBackend() override;

  static constexpr size_t kRingThresholdBytes = 256 << 10;
  static constexpr size_t kNativeMinBytes = size_t{64} << 20;

 protected:
  absl::Status RunAllReduce(const Comm& c, const Tensor& t, ReduceOp op, const StageHooks* hooks) override;
  // libgloo's allreduce (BCUBE below kRingThresholdBytes, ring above).
  absl::Status RunNativeAllReduce(const Comm& c, const Tensor& t, ReduceOp op);
  absl::Status RunBroadcast(const Comm& c, const Tensor& t, int root) override;
  absl::Status RunReduce(const Comm& c, const Tensor& t, ReduceOp op, int root) override;
  absl::Status RunAllGather(const Comm& c, const Tensor& in, const Tensor& out_flat,
                            absl::Span<const size_t> bytes) override;
  absl::Status RunAllToAll(const Comm& c, const Tensor& in, absl::Span<const size_t> send_bytes,
                           const Tensor& out, absl::Span<const size_t> recv_bytes) override;
  absl::Status RunBarrier(const Comm& c) override;

 private:
  std::shared_ptr<::gloo::Context> context_;
  size_t native_min_bytes_;
  // all_reduce's threshold when the backend has several channels.
  size_t allreduce_native_min_bytes_ = SIZE_MAX;
};

}  // namespace loom::collectives::gloo
