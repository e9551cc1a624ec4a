// Backend "nccl": NVIDIA's NCCL for CUDA tensors.
//
// One communicator per group (the unique id travels through the store under
// "nccl/uid"), one non-blocking communication stream, and one CUDA event per
// op, so every call returns at once and the Work completes when its event
// fires. A watchdog thread polls pending ops: on ncclCommGetAsyncError or when
// an op passes its deadline (start + options.timeout) it aborts the
// communicator (ncclCommAbort) and fails that op and every pending one with
// the op's name and sequence number; later calls fail with FailedPrecondition.
//
// Ops: all of them. Reductions (all_reduce, reduce, reduce_scatter) take f32,
// f64, bf16, f16, i32, i64; data movement also takes bool (as bytes).
// all_gather/reduce_scatter lists, gather, scatter and all_to_all are grouped
// NCCL broadcasts/reduces/sends/recvs, so uneven sizes work.
//
// Without a GPU (or built without CUDA) Create returns Unavailable with the
// reason; ProcessGroup reports it at the first call on a CUDA tensor.
#pragma once

#include <atomic>
#include <memory>

#include "collectives/backend.h"

namespace loom::collectives::nccl {

class NcclBackend : public Backend {
 public:
  static absl::StatusOr<std::shared_ptr<Backend>> Create(const BackendContext& ctx);

  // Test hook: makes the communication stream wait until *flag != 0 (a host
  // function enqueued on the stream), so the next op hangs and the watchdog must
  // abort it. Set *flag afterwards to release the stream for teardown.
  virtual void TestOnlyBlockStreamOnHostFlag(std::atomic<int>* flag) = 0;
};

}  // namespace loom::collectives::nccl
