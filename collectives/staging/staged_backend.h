// Backend "cuda:gloo": collectives on device buffers staged through pinned
// host memory, run by a CPU backend (Gloo) on the host copies.
//
// An op is a list of segments: device ranges laid out back to back in the
// host buffer, each copied to the host before the inner op, back to the
// device after it, or both. Bucket j of an op is bytes [j*B, (j+1)*B) of
// every segment (B = StagingOptions::bucket_bytes, whole elements; a segment
// that ends before j*B has an empty slice there), and runs as one inner op on
// the host slices. The buckets pipeline through the Copier (copier.h):
//
//   ToHost(0)
//   for i in 0..n-1:
//     wait ToHost(i); issue the inner op on host bucket i   (async Work)
//     ToHost(i+1)                      -- overlaps the reduction of bucket i
//     wait inner op i-1; ToDevice(i-1) -- overlaps the reduction of bucket i
//   wait inner op n-1; ToDevice(n-1); wait every ToDevice
//
// all_reduce, reduce_scatter(_from) and all_gather(_into) run over a
// LocalGroup (local_group.h) when one is given: the ranks share one host, and
// each reads the others' staging arenas in shared memory, reducing its part of
// every chunk there, or copying the other ranks' blocks back from them.
// Otherwise,
// all_reduce over an inner backend that takes StageHooks (types.h; Gloo's
// does) runs as one inner op on the whole buffer instead: the copies to the
// host are issued in the order the algorithm reads the buffer, each read
// waits only for its own piece, and each piece goes back to the device as
// soon as it is final (overlap_hooks.h), so both copies overlap the
// reduction.
//
// Every rank must run the same number of inner ops, so an op is cut into
// buckets only where each rank knows the longest segment of the group:
//
//   broadcast, reduce (and all_reduce  the tensor (the same size everywhere)
//   over an inner backend without
//   StageHooks)
//   all_gather(_into), reduce_scatter(_from)
//                                      the per-rank list (sizes agree across
//                                      ranks and may differ per rank)
//   send, recv                         the tensor (both ends the same size)
//   all_to_all, gather, scatter        one bucket: a rank knows only its own
//                                      split sizes (all_to_all) or, off the
//                                      root, its own block
//   barrier                            one inner barrier
//
// The algorithms are the inner backend's (created by name, "gloo" for
// cuda:gloo, on its own store prefix and connections so its op order is this
// backend's bucket order).
//
// Work semantics are Backend's: validated on the caller's thread, run in
// issue order on one executor thread (internal/op_executor.h) with deadline =
// start + options.timeout (copies and inner ops share that deadline). Send and
// recv run there too, each to completion: a send that the inner transport
// cannot complete before its receiver posts the recv (Loom's TCP transport
// completes small sends at once) holds back this rank's later ops meanwhile,
// as on cuda:nccl, where both share one stream; ranks that exchange order
// send and recv oppositely. A failed op is recorded in this backend's flight
// recorder (dumped to "<dir>/cuda:gloo.rank<R>.txt" when a directory is set)
// and every later op fails with FailedPrecondition quoting it. Abort() on a
// running op aborts its inner ops (a no-op once the backend is gone). Create
// it with std::make_shared.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectives/backend.h"
#include "collectives/flight_recorder.h"
#include "collectives/internal/op_executor.h"
#include "collectives/staging/copier.h"
#include "collectives/staging/local_group.h"

namespace loom::collectives::staging {

struct StagingOptions {
  // Bytes per bucket (rounded down to whole elements, at least one): the unit
  // that one copy and one inner op move. Smaller buckets overlap more and pay
  // more per-op latency.
  size_t bucket_bytes = kDefaultStagingBucketBytes;
  // The overlapped all_reduce's pieces (StageHooks::piece_bytes).
  size_t piece_bytes = kDefaultStagingPieceBytes;
  std::string flight_recorder_dir;  // "" = never dump
};

// Where staged ops spent their time on the executor thread, summed over the
// ops run so far: waiting for copies to the host, issuing and waiting for
// inner ops, waiting for copies to the device, and each op's whole run
// (host buffer, bucket plan and pipeline). `run` less the three waits is the
// pipeline's own cost.
struct StagingStats {
  int64_t ops = 0;
  absl::Duration to_host_wait, inner, to_device_wait, run;
  // The overlapped all_reduce: time the inner algorithm's threads spent
  // waiting for copies to the host, summed over them (part of `inner`).
  absl::Duration algorithm_host_wait;
  // The shared-memory all_reduce: time waiting for the other ranks'
  // progress (part of `inner`, which is this plus its own reductions).
  absl::Duration peer_wait;
};

class StagedBackend : public Backend, public std::enable_shared_from_this<StagedBackend> {
 public:
  // `local` (may be null) runs every all_reduce; it uses `copier`.
  StagedBackend(std::string name, std::shared_ptr<Backend> inner, std::unique_ptr<Copier> copier,
                StagingOptions options, std::unique_ptr<LocalGroup> local = nullptr);
  ~StagedBackend() override;

  absl::string_view name() const override { return name_; }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool Supports(OpType op, DType dtype, DeviceKind device) const override;
  FlightRecorder* flight_recorder() override { return executor_.recorder(); }
  // The CPU backend that runs the algorithms on the host buckets.
  Backend* inner() { return inner_.get(); }
  StagingStats Stats() const;
  // Whether all_reduce runs over shared memory (a LocalGroup).
  bool shared_memory() const { return local_ != nullptr; }

  absl::StatusOr<WorkPtr> AllReduce(const Tensor& tensor, const AllReduceOptions& o) override;
  absl::StatusOr<WorkPtr> Broadcast(const Tensor& tensor, const BroadcastOptions& o) override;
  absl::StatusOr<WorkPtr> Reduce(const Tensor& tensor, const ReduceOptions& o) override;
  absl::StatusOr<WorkPtr> AllGather(absl::Span<const Tensor> outputs, const Tensor& input,
                                    const AllGatherOptions& o) override;
  absl::StatusOr<WorkPtr> AllGatherInto(const Tensor& output, const Tensor& input,
                                        const AllGatherOptions& o) override;
  absl::StatusOr<WorkPtr> ReduceScatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                        const ReduceScatterOptions& o) override;
  absl::StatusOr<WorkPtr> ReduceScatterFrom(const Tensor& output, const Tensor& input,
                                            const ReduceScatterOptions& o) override;
  absl::StatusOr<WorkPtr> AllToAll(const Tensor& output, const Tensor& input,
                                   const AllToAllOptions& o) override;
  absl::StatusOr<WorkPtr> Gather(absl::Span<const Tensor> outputs, const Tensor& input,
                                 const GatherOptions& o) override;
  absl::StatusOr<WorkPtr> Scatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                  const ScatterOptions& o) override;
  absl::StatusOr<WorkPtr> Send(const Tensor& tensor, int dst, const SendRecvOptions& o) override;
  absl::StatusOr<WorkPtr> Recv(const Tensor& tensor, int src, const SendRecvOptions& o) override;
  absl::StatusOr<WorkPtr> Barrier(const BarrierOptions& o) override;

 private:
  // One copy between a device range and a host range.
  struct Copy {
    char* dst;
    const char* src;
    size_t bytes;
  };
  // One bucket: copies to the host, the inner op on the host copies (given
  // the time left), copies back to the device.
  struct Bucket {
    std::vector<Copy> to_host;
    std::function<absl::StatusOr<WorkPtr>(absl::Duration)> run;
    std::vector<Copy> to_device;
    // Once the inner op is done: waits for copies its algorithm issued
    // itself (the overlapped all_reduce's copies back), if any.
    std::function<absl::Status(absl::Time deadline)> settle;
  };
  // Builds the buckets of an op once the host buffer is known.
  using Plan = std::function<std::vector<Bucket>(char* host)>;
  // A device range of an op and the copies it needs (see the top).
  struct Segment {
    char* dev;
    size_t bytes;
    bool to_host;
    bool to_device;
  };
  // The inner op of one bucket on its host slices (one per segment, in order).
  using BucketOp = std::function<absl::StatusOr<WorkPtr>(absl::Span<const Tensor> host, absl::Duration left)>;
  enum class Bucketing { kBuckets, kOne };

  // Lays out the segments, cuts them into buckets (or one) and enqueues the
  // op; Unimplemented when the inner backend cannot run it for `dtype`.
  absl::StatusOr<WorkPtr> Stage(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                std::vector<Segment> segments, Bucketing bucketing, BucketOp run);
  // Every list-form all_gather and reduce_scatter: one inner op per bucket.
  absl::StatusOr<WorkPtr> StageAllGather(OpType op, const Tensor& input, std::vector<Segment> segments,
                                         absl::Duration timeout);
  absl::StatusOr<WorkPtr> StageReduceScatter(OpType op, const Tensor& output, std::vector<Segment> segments,
                                             const ReduceScatterOptions& o);
  // Queues an op on the executor; it runs as RunTask(host_bytes, plan).
  absl::StatusOr<WorkPtr> Enqueue(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                  size_t host_bytes, Plan plan);
  // Queues `body(deadline, aborted)`; aborted turns true when the op's Work
  // is aborted while it runs.
  using Body = std::function<absl::Status(absl::Time, const std::atomic<bool>&)>;
  absl::StatusOr<WorkPtr> EnqueueBody(OpType op, DType dtype, int64_t numel, absl::Duration timeout, size_t bytes,
                                      Body body);
  // all_reduce over local_.
  absl::StatusOr<WorkPtr> LocalAllReduce(const Tensor& t, ReduceOp op, absl::Duration timeout);
  // Queues `body`, an op over local_, adding its LocalStats to stats_.
  using LocalBody = std::function<absl::Status(absl::Time, const std::atomic<bool>&, LocalStats*)>;
  absl::StatusOr<WorkPtr> LocalOp(OpType op, DType dtype, int64_t numel, absl::Duration timeout, size_t bytes,
                                  LocalBody body);
  absl::Status RunTask(size_t host_bytes, const Plan& plan, absl::Time deadline);
  // all_reduce as one inner op whose algorithm drives the copies (see the top).
  absl::StatusOr<WorkPtr> OverlappedAllReduce(const Tensor& t, ReduceOp op, absl::Duration timeout);
  absl::Status Pipeline(std::vector<Bucket>& buckets, absl::Time deadline);
  absl::StatusOr<WorkPtr> Issue(Bucket& b, absl::Time deadline);
  // Adds the time since `since` to stats_.*field; returns `s`.
  absl::Status Timed(absl::Duration StagingStats::*field, absl::Status s, absl::Time since);
  size_t BucketBytes(DType dtype) const;
  absl::Status CheckDevice(const Tensor& t, absl::string_view op, absl::string_view arg) const;
  // `list` holds size() CUDA tensors of like's dtype (`like_arg` names like).
  absl::Status CheckList(absl::Span<const Tensor> list, const Tensor& like, absl::string_view op,
                         absl::string_view arg, absl::string_view like_arg) const;

  std::string name_;
  std::shared_ptr<Backend> inner_;
  std::unique_ptr<Copier> copier_;
  StagingOptions options_;
  std::unique_ptr<LocalGroup> local_;  // after copier_, which it uses until destroyed
  mutable absl::Mutex mu_;
  std::vector<WorkPtr> in_flight_ ABSL_GUARDED_BY(mu_);  // inner ops of the running task
  StagingStats stats_ ABSL_GUARDED_BY(mu_);
  internal::OpExecutor executor_;  // last: its thread uses the members above
};

}  // namespace loom::collectives::staging
