// Collective ops in the IR and the communicators they run through.
//
// The registry ops all_reduce, all_gather and reduce_scatter (registered by
// kernels/collective_ops.cc, OpDef::collective = true) are ordinary IR ops. Their
// attributes name a process group ("group", default "world") and, for the ops
// that change shapes, its size ("world"), so shapes stay static:
//
//   %g = all_reduce(%x) {group="dp", reduce="sum"} : f32[4, 8]
//   %y = all_gather(%x) {axis=1, group="tp", world=2} : f32[4, 16]
//   %z = reduce_scatter(%x) {axis=0, group="tp", reduce="sum", world=2} : f32[2, 8]
//
// At lowering (compiler/lowering.h) each collective node is bound to the
// Communicator registered for its group; a group of world 1 needs none (the
// one-rank communicator is used). A communicator is called in the same order
// on every rank, one call per node per step, as the graph's order is the same
// on every rank.
//
// Gradients: all_reduce(sum) <-> all_reduce(sum); all_gather <-> reduce_scatter
// (sum) along the same axis; avg likewise with avg. max/min have no gradient.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "base/tensor.h"

namespace loom::collectives {
class ProcessGroup;
}

namespace loom::compiler::comm {

enum class ReduceKind { kSum, kAvg, kMax, kMin };
absl::StatusOr<ReduceKind> ParseReduceKind(absl::string_view s);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // out = reduce over ranks of in (same shape).
  virtual absl::Status AllReduce(const Tensor& in, Tensor& out, ReduceKind kind) = 0;
  // out = concatenation over ranks of in along `axis` (rank order).
  virtual absl::Status AllGather(const Tensor& in, Tensor& out, int axis) = 0;
  // out = this rank's block along `axis` of the reduction over ranks of in.
  virtual absl::Status ReduceScatter(const Tensor& in, Tensor& out, int axis, ReduceKind kind) = 0;
};

// World size 1: every collective is a copy.
class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduce(const Tensor& in, Tensor& out, ReduceKind) override;
  absl::Status AllGather(const Tensor& in, Tensor& out, int) override;
  absl::Status ReduceScatter(const Tensor& in, Tensor& out, int, ReduceKind) override;
};

// Over a collectives::ProcessGroup (target //compiler/comm:pg_communicator) (Gloo, UCX, TCP, NCCL by device). Staging
// buffers for non-leading axes are allocated on first use and reused, so a
// steady-state step allocates nothing. Each call waits for its Work (timeout
// from `timeout_ms`).
std::unique_ptr<Communicator> MakeProcessGroupCommunicator(collectives::ProcessGroup* pg,
                                                           int64_t timeout_ms = 300000);

// Communicators by group name, handed to lowering.
using CommunicatorMap = std::map<std::string, Communicator*>;

}  // namespace loom::compiler::comm
