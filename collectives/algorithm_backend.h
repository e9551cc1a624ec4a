// AlgorithmBackend: a Backend made of the shared algorithms plus a Transport.
//
// It is the "generic" backend (name "tcp" over TcpTransport, "ucx" over
// UcxTransport) and the base of the Gloo backend, which overrides the Run*
// hooks with Gloo's native algorithms where libgloo has the op and dtype.
//
// Execution: calls are validated on the caller's thread (InvalidArgument naming
// the argument), then queued to one executor thread (internal/op_executor.h)
// that runs them in issue order, each with deadline = start + options.timeout.
// When an op fails the backend aborts its transport (the peers are out of
// step) and fails every later op with FailedPrecondition quoting the first
// error: recreate the group.
//
// Channels (SetChannels, channels.h): with extra transports, the default
// all_reduce / all_gather / reduce_scatter hooks cut a large message into
// slices that run concurrently, one per channel and thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/backend.h"
#include "collectives/channels.h"
#include "collectives/flight_recorder.h"
#include "collectives/internal/op_executor.h"
#include "collectives/transport/transport.h"

namespace loom::collectives {

static_assert(kDefaultChannelMinSliceBytes == kMinChannelSliceBytes);

// BackendContext's channel options, for ConnectExtraChannels.
inline ChannelOptions ChannelOptionsOf(const BackendContext& ctx) {
  return {ctx.channels, ctx.channel_min_slice_bytes};
}

class AlgorithmBackend : public Backend {
 public:
  AlgorithmBackend(std::string name, std::unique_ptr<transport::Transport> transport);
  ~AlgorithmBackend() override;

  absl::string_view name() const override { return name_; }
  int rank() const override { return transport_->rank(); }
  int size() const override { return transport_->size(); }
  bool Supports(OpType op, DType dtype, DeviceKind device) const override;

  absl::StatusOr<WorkPtr> AllReduce(const Tensor& tensor, const AllReduceOptions& o) override;
  bool TakesStageHooks() const override { return true; }
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

  FlightRecorder* flight_recorder() override { return executor_.recorder(); }
  void set_flight_recorder_dir(std::string dir) { executor_.set_flight_recorder_dir(std::move(dir)); }
  // The group's store: a failing rank records its error under "error/<rank>"
  // (before aborting its transport) and quotes the errors other ranks recorded,
  // so a survivor that only saw a neighbour drop still names the dead peer.
  void set_store(std::shared_ptr<store::Store> store) { store_ = std::move(store); }
  // Extra channels (see channels.h): a large all_reduce then runs as
  // ChannelPool::Slices(bytes) slices, one per channel and thread. Call
  // before the first op.
  void SetChannels(ExtraChannels extra) {
    channels_ = std::make_unique<ChannelPool>(std::move(extra));
  }
  int channels() const { return channels_ ? channels_->channels() : 1; }
  // Applies the BackendContext settings (store, flight recorder dir).
  void Configure(const BackendContext& ctx) {
    set_store(ctx.store);
    set_flight_recorder_dir(ctx.flight_recorder_dir);
  }

 protected:
  using Comm = algorithms::Comm;
  // Hooks run on the executor thread with validated, contiguous CPU tensors.
  // The defaults use the shared algorithms over transport().
  // `hooks` (may be null): AllReduceOptions::stage, for every path.
  virtual absl::Status RunAllReduce(const Comm& c, const Tensor& t, ReduceOp op, const StageHooks* hooks);
  virtual absl::Status RunBroadcast(const Comm& c, const Tensor& t, int root);
  virtual absl::Status RunReduce(const Comm& c, const Tensor& t, ReduceOp op, int root);
  virtual absl::Status RunAllGather(const Comm& c, const Tensor& in, const Tensor& out_flat,
                                    absl::Span<const size_t> bytes);
  virtual absl::Status RunReduceScatter(const Comm& c, const Tensor& in_flat, const Tensor& out,
                                        absl::Span<const size_t> counts, ReduceOp op);
  virtual absl::Status RunAllToAll(const Comm& c, const Tensor& in, absl::Span<const size_t> send_bytes,
                                   const Tensor& out, absl::Span<const size_t> recv_bytes);
  virtual absl::Status RunGather(const Comm& c, const Tensor& in, void* out,
                                 absl::Span<const size_t> bytes, int root);
  virtual absl::Status RunScatter(const Comm& c, const void* in, const Tensor& out,
                                  absl::Span<const size_t> bytes, int root);
  virtual absl::Status RunBarrier(const Comm& c);
  transport::Transport* transport() { return transport_.get(); }
  // Subclasses that own resources the executor uses call this first in their destructor.
  void StopExecutor();

 private:
  using PostFn = std::function<absl::StatusOr<std::unique_ptr<transport::TransportRequest>>(const Comm&)>;
  // Queues an op on the executor: `fn` runs it to completion; `post` (point
  // to point) posts it in order and the executor's waiter thread completes it,
  // keeping `keep_alive` until then.
  absl::StatusOr<WorkPtr> Enqueue(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                  std::function<absl::Status(const Comm&)> fn, PostFn post = nullptr,
                                  Tensor keep_alive = Tensor());
  // Run by the constructor once name_ and transport_ are set.
  internal::OpExecutorOptions ExecutorOptions();
  // The executor's failure hooks: record this rank's error in the store and
  // quote the other ranks'; abort the transports.
  absl::Status DescribeFailure(const absl::Status& e);
  void AbortTransports(const absl::Status& e);

  std::string name_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<ChannelPool> channels_;  // null: one channel
  std::shared_ptr<store::Store> store_;
  internal::OpExecutor executor_;  // last: its threads use the members above
};

// Validation helpers shared by backends: InvalidArgument naming op and argument.
absl::Status CheckTensorArg(const Tensor& t, absl::string_view op, absl::string_view arg);
absl::Status CheckRank(int r, int size, absl::string_view op, absl::string_view arg);
// all_to_all's bytes per peer for `t` (arg "input" or "output"): `given` rows
// per rank (empty: equal splits), checked against t's leading dimension.
absl::StatusOr<std::vector<size_t>> AllToAllSplitBytes(const Tensor& t, absl::Span<const int64_t> given, int n,
                                                       absl::string_view arg);

}  // namespace loom::collectives
