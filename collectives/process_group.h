// ProcessGroup: the user-facing collectives API (like c10d's ProcessGroup).
//
//   auto store = TcpStore::FromEnv().value();
//   ProcessGroupOptions o;  o.backend = "cpu:gloo,cuda:nccl";
//   LOOM_ASSIGN_OR_RETURN(auto pg, ProcessGroup::Create(store, rank, world, o));
//   LOOM_ASSIGN_OR_RETURN(WorkPtr w, pg->AllReduce(t, {}));
//   LOOM_RETURN_IF_ERROR(w->Wait());
//
// Dispatch: the backend spec maps device kinds to backend names, PyTorch style:
// "gloo" (every device), "cpu:gloo,cuda:nccl", "cpu:ucx". A "cuda:<name>"
// entry selects the backend registered as "cuda:<name>" where there is one
// ("cuda:gloo": device buffers staged through host memory, collectives/staging),
// else "<name>". Each call picks the
// backend by its tensors' device; barrier uses the first backend of the spec.
// A device with no backend, or a backend that does not support the op/dtype,
// fails at the call with Unimplemented naming op, device, dtype and backend.
// A backend that could not start (e.g. nccl without a GPU) fails calls on its
// device with Unavailable quoting why.
//
// Cross-rank contract: every rank calls Create/NewGroup and every collective
// in the same order. NewGroup is collective over the parent: all parent ranks
// call it with the same rank list; non-members get nullptr.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/backend.h"

namespace loom::collectives {

struct BackendSpec {
  std::map<DeviceKind, std::string> by_device;
  std::string default_backend;  // used for barrier and devices not listed
};
// Parses "gloo" or "cpu:gloo,cuda:nccl". InvalidArgument names the bad entry.
absl::StatusOr<BackendSpec> ParseBackendSpec(absl::string_view spec);

struct ProcessGroupOptions {
  std::string backend = "cpu:gloo";
  absl::Duration timeout = absl::Seconds(60);  // rendezvous / setup
  std::string flight_recorder_dir;
  // Bytes per bucket of staging backends ("cuda:gloo"): BackendContext.
  size_t staging_bucket_bytes = kDefaultStagingBucketBytes;
  // Bytes per piece of a staging backend's all_reduce over the ring: the unit
  // of its copies to the host, of its messages and of its copies back, so a
  // smaller piece starts the ring and ends the copies back sooner and costs
  // more messages and copies.
  size_t staging_piece_bytes = kDefaultStagingPieceBytes;
  // Where a staging backend's all_reduce, reduce_scatter and all_gather run:
  // "auto" (the default) runs them in shared memory when every rank of the
  // group is on this host, each rank reading the others' staging buffers
  // directly, in pieces of staging_piece_bytes
  // (collectives/staging/local_group.h), and falls back to "ring" otherwise;
  // "shm" requires shared memory (creating the backend fails, saying why,
  // when some rank cannot map it); "ring" runs the inner backend's ring over
  // each rank's own staging buffer for all_reduce, and its buckets for the
  // other two.
  std::string staging_path = "auto";

  // Tuning of the CPU backends (each is copied into BackendContext). The
  // defaults suit every host; change them to compare layouts or to exercise a
  // path in tests. A backend that uses an option refuses a bad value at Create
  // with InvalidArgument naming the option and the value.
  //
  // Channels (collectives/channels.h) of the tcp, gloo and ucx backends: how
  // many independent connections a large all_reduce, all_gather or
  // reduce_scatter is sliced over, 1..8, or 0 = automatic (rank 0's usable
  // CPUs / (2 * group size), clamped to [1, 4]). Rank 0's value (and slice
  // floor) is the group's; the other ranks follow it.
  int channels = 0;
  // The smallest slice worth its own channel (> 0 bytes).
  size_t channel_min_slice_bytes = kDefaultChannelMinSliceBytes;
  // gloo: the message size from which libgloo's own algorithms run each op
  // libgloo has (0: always). kAutomatic: GlooBackend::kNativeMinBytes
  // (64 MiB), except all_reduce with several channels, which stays on the
  // sliced ring.
  int64_t gloo_native_min_bytes = kAutomatic;
  // gloo: what carries the shared algorithms: "tcp" (Loom's TcpTransport
  // beside Gloo's mesh, with channels) or "gloo" (Gloo's unbound buffers, one
  // channel, and libgloo's algorithms at every size unless
  // gloo_native_min_bytes says otherwise).
  std::string gloo_transport = "tcp";
  // SO_SNDBUF/SO_RCVBUF of the TcpTransport sockets (tcp and gloo backends):
  // bytes up to 1 GiB, 0 = the kernel's autotuning, kAutomatic = 4 MiB where
  // net.core.{w,r}mem_max allow it, else the kernel's autotuning.
  int64_t tcp_socket_buffer_bytes = kAutomatic;
};

class ProcessGroup {
 public:
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(std::shared_ptr<store::Store> store, int rank, int size,
                                                              ProcessGroupOptions o);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks of this group in the parent's numbering (identity for the root group).
  const std::vector<int>& parent_ranks() const { return parent_ranks_; }

  // Collective over this group; returns nullptr on ranks not in `ranks`.
  absl::StatusOr<std::unique_ptr<ProcessGroup>> NewGroup(std::vector<int> ranks);

  // The backend serving `device`, or the reason there is none (names op/device).
  absl::StatusOr<Backend*> BackendFor(Device device, OpType op, DType dtype);

  absl::StatusOr<WorkPtr> AllReduce(const Tensor& t, const AllReduceOptions& o);
  absl::StatusOr<WorkPtr> Broadcast(const Tensor& t, const BroadcastOptions& o);
  absl::StatusOr<WorkPtr> Reduce(const Tensor& t, const ReduceOptions& o);
  absl::StatusOr<WorkPtr> AllGather(absl::Span<const Tensor> outputs, const Tensor& input,
                                    const AllGatherOptions& o);
  absl::StatusOr<WorkPtr> AllGatherInto(const Tensor& output, const Tensor& input,
                                        const AllGatherOptions& o);
  absl::StatusOr<WorkPtr> ReduceScatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                        const ReduceScatterOptions& o);
  absl::StatusOr<WorkPtr> ReduceScatterFrom(const Tensor& output, const Tensor& input,
                                            const ReduceScatterOptions& o);
  absl::StatusOr<WorkPtr> AllToAll(const Tensor& output, const Tensor& input, const AllToAllOptions& o);
  absl::StatusOr<WorkPtr> Gather(absl::Span<const Tensor> outputs, const Tensor& input,
                                 const GatherOptions& o);
  absl::StatusOr<WorkPtr> Scatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                  const ScatterOptions& o);
  absl::StatusOr<WorkPtr> Send(const Tensor& t, int dst, const SendRecvOptions& o);
  absl::StatusOr<WorkPtr> Recv(const Tensor& t, int src, const SendRecvOptions& o);
  absl::StatusOr<WorkPtr> Barrier(const BarrierOptions& o);

  // Writes every backend's flight recorder to "<dir>/<backend>.rank<R>.txt"
  // (R = rank in this group). Failing ops dump automatically when
  // options.flight_recorder_dir is set; healthy ranks dump when asked.
  absl::Status DumpFlightRecorders(const std::string& dir);

 private:
  ProcessGroup() = default;
  absl::StatusOr<Backend*> Pick(OpType op, const Tensor& first, absl::Span<const Tensor> others);

  std::shared_ptr<store::Store> store_;  // prefixed for this group
  int rank_ = 0, size_ = 1;
  std::vector<int> parent_ranks_;
  ProcessGroupOptions options_;
  BackendSpec spec_;
  std::map<std::string, std::shared_ptr<Backend>> backends_;
  std::map<std::string, absl::Status> unavailable_;
  int next_group_id_ = 0;
};

}  // namespace loom::collectives
