// The CPU loop that runs a fused node (passes/fusion.h).
//
// The fused subgraph's members (elementwise ops, all producing the output's
// shape) run chunk by chunk: the output is split along its first dimension
// into chunks of about `chunk_elems` elements; for each chunk every member's
// kernel runs on that chunk, reading external inputs as views (narrowed when
// they span the first dimension, whole when they broadcast) and writing either
// a chunk-sized scratch buffer (intermediates) or the output chunk (the root).
// Intermediates therefore never exist as whole tensors, only as a few KiB of
// cache-resident scratch that is allocated once, at lowering time. A step does
// no allocation.
//
// Chunks run in parallel on the global thread pool (base/thread_pool.h); each
// worker takes one of NumThreads() scratch slots made at creation, and kernels'
// own ParallelFor calls run inline inside it. Chunk boundaries depend only on
// the shapes and chunk_elems, so results do not depend on the thread count.
//
// Not thread-safe: one FusedKernel belongs to one Program call.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"
#include "kernels/registry.h"

namespace loom::compiler {

// Picks the kernel for a node: the fast CPU kernel when impl is kKernel and the
// op has one for every floating dtype involved, otherwise the reference.
absl::StatusOr<kernels::KernelFn> ResolveKernel(const kernels::OpDef& def, const std::vector<ir::TensorMeta>& inputs,
                                                const std::vector<ir::TensorMeta>& outputs, kernels::Impl impl);

class FusedKernel {
 public:
  static absl::StatusOr<std::shared_ptr<FusedKernel>> Create(const ir::Graph& subgraph, kernels::Impl impl,
                                                             int64_t chunk_elems);
  absl::Status Run(absl::Span<const Tensor> inputs, absl::Span<Tensor> outputs);
  int64_t scratch_bytes() const { return scratch_bytes_; }
  // As a KernelFn (holds a reference to this kernel).
  static kernels::KernelFn AsKernelFn(std::shared_ptr<FusedKernel> k);

 private:
  struct Member {
    std::string op;
    kernels::KernelFn fn;
    ir::Attrs attrs;
    std::vector<int> args;  // >= 0: member index (its chunk result); < 0: external input -1-k
  };
  // Per-worker state: views and chunk-sized scratch for every member.
  struct Slot {
    std::vector<std::vector<Tensor>> arg_views;  // [member][arg]
    std::vector<Tensor> out_views;               // [member]
    std::vector<Tensor> scratch;                 // [member]; undefined for the root
  };
  struct Step;
  absl::Status RunChunks(const Step& step, int64_t lo, int64_t hi, Slot& slot);
  int AcquireSlot();
  void ReleaseSlot(int s);

  std::vector<Member> members_;
  std::vector<Slot> slots_;
  std::atomic<uint64_t> free_slots_{0};
  int64_t chunk_elems_ = 0;
  int64_t scratch_bytes_ = 0;
};

}  // namespace loom::compiler
