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
// Everything else (bf16 and bool reductions, reduce-scatter, gather and
// scatter, send/recv) runs the shared algorithms over GlooTransport (Gloo's
// unbound buffers), so every op covers every dtype. gather/scatter stay on the
// shared direct algorithm because only the root knows every rank's size, while
// gloo::gather/scatter need equal sizes agreed by all ranks; the shared one is
// the same pattern (root posts one unbound-buffer receive per rank).
#pragma once

#include <memory>

#include "collectives/algorithm_backend.h"

namespace gloo { class Context; }

namespace loom::collectives {

class GlooBackend : public AlgorithmBackend {
 public:
  static absl::StatusOr<std::shared_ptr<Backend>> Create(const BackendContext& ctx);
  explicit GlooBackend(std::shared_ptr<gloo::Context> context);
  ~GlooBackend() override;

  static constexpr size_t kRingThresholdBytes = 256 << 10;

 protected:
  absl::Status RunAllReduce(const Comm& c, const Tensor& t, ReduceOp op) override;
  absl::Status RunBroadcast(const Comm& c, const Tensor& t, int root) override;
  absl::Status RunReduce(const Comm& c, const Tensor& t, ReduceOp op, int root) override;
  absl::Status RunAllGather(const Comm& c, const Tensor& in, const Tensor& out_flat,
                            absl::Span<const size_t> bytes) override;
  absl::Status RunAllToAll(const Comm& c, const Tensor& in, absl::Span<const size_t> send_bytes,
                           const Tensor& out, absl::Span<const size_t> recv_bytes) override;
  absl::Status RunBarrier(const Comm& c) override;

 private:
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace loom::collectives
