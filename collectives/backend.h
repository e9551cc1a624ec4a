// Backend: one communication library (gloo, ucx, tcp, nccl) for one group.
//
// ProcessGroup -> Backend -> Work. A Backend validates each call at once
// (bad arguments: InvalidArgument naming the argument; an op/dtype it cannot
// run: Unimplemented naming backend, op, dtype) and returns a Work that
// completes asynchronously. Ops run in issue order; every rank of the group
// must issue the same collectives in the same order with matching sizes.
//
// Tensor contract: CPU (or the backend's device), contiguous. In-place ops
// (all_reduce, broadcast, reduce) write into their tensor; reduce's result is
// defined on the root only. List forms take one tensor per rank, whose sizes
// may differ between ranks but must agree across ranks.
//
// Backends are created by name through the registry below with a
// BackendContext (a store already prefixed for this group, rank, size).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/tensor.h"
#include "collectives/flight_recorder.h"
#include "collectives/store/store.h"
#include "collectives/types.h"
#include "collectives/work.h"

namespace loom::collectives {

using WorkPtr = std::shared_ptr<Work>;

inline constexpr size_t kDefaultStagingBucketBytes = size_t{4} << 20;
// The pieces a staged ring all_reduce moves and copies (StageHooks::piece_bytes).
inline constexpr size_t kDefaultStagingPieceBytes = size_t{1} << 20;
inline constexpr size_t kDefaultChannelMinSliceBytes = size_t{512} << 10;  // channels.h
inline constexpr int64_t kAutomatic = -1;  // gloo_native_min_bytes, tcp_socket_buffer_bytes

class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What this backend can run (advertised; every op checks it before queueing).
  virtual bool Supports(OpType op, DType dtype, DeviceKind device) const = 0;
  // The per-rank record of recent ops (nullptr if the backend keeps none).
  virtual FlightRecorder* flight_recorder() { return nullptr; }
  // Whether AllReduce honours AllReduceOptions::stage (types.h StageHooks);
  // a backend that does not refuses options that set it.
  virtual bool TakesStageHooks() const { return false; }

  [[nodiscard]] virtual absl::StatusOr<WorkPtr> AllReduce(const Tensor& tensor,
                                                          const AllReduceOptions& o) = 0;
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> Broadcast(const Tensor& tensor,
                                                          const BroadcastOptions& o) = 0;
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> Reduce(const Tensor& tensor,
                                                       const ReduceOptions& o) = 0;
  // outputs[i] receives rank i's input.
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> AllGather(absl::Span<const Tensor> outputs,
                                                          const Tensor& input,
                                                          const AllGatherOptions& o) = 0;
  // output.numel() == size * input.numel(); rank i's input lands at i * input.numel().
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> AllGatherInto(const Tensor& output,
                                                              const Tensor& input,
                                                              const AllGatherOptions& o) = 0;
  // output (on rank r) = reduction over ranks of inputs[r].
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> ReduceScatter(const Tensor& output,
                                                              absl::Span<const Tensor> inputs,
                                                              const ReduceScatterOptions& o) = 0;
  // input.numel() == size * output.numel().
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> ReduceScatterFrom(const Tensor& output,
                                                                  const Tensor& input,
                                                                  const ReduceScatterOptions& o) = 0;
  // Row block i of input goes to rank i; output row block j comes from rank j.
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> AllToAll(const Tensor& output, const Tensor& input,
                                                         const AllToAllOptions& o) = 0;
  // On root, outputs[i] receives rank i's input (outputs ignored elsewhere).
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> Gather(absl::Span<const Tensor> outputs,
                                                       const Tensor& input,
                                                       const GatherOptions& o) = 0;
  // Rank i's output receives root's inputs[i] (inputs ignored elsewhere).
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> Scatter(const Tensor& output,
                                                        absl::Span<const Tensor> inputs,
                                                        const ScatterOptions& o) = 0;
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> Send(const Tensor& tensor, int dst,
                                                     const SendRecvOptions& o) = 0;
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> Recv(const Tensor& tensor, int src,
                                                     const SendRecvOptions& o) = 0;
  [[nodiscard]] virtual absl::StatusOr<WorkPtr> Barrier(const BarrierOptions& o) = 0;
};

struct BackendContext {
  std::shared_ptr<store::Store> store;  // already prefixed for this group and backend
  int rank = 0;
  int size = 1;
  absl::Duration timeout = kDefaultTimeout;  // for setup (rendezvous)
  std::string flight_recorder_dir;  // where to dump the flight recorder on failure ("" = nowhere)
  // Bucket size of backends that stage device buffers through host memory
  // ("cuda:gloo", collectives/staging): one copy and one host op per bucket.
  size_t staging_bucket_bytes = kDefaultStagingBucketBytes;
  // Piece size of their overlapped all_reduce: ProcessGroupOptions.
  size_t staging_piece_bytes = kDefaultStagingPieceBytes;
  // Where their all_reduce, reduce_scatter and all_gather run:
  // ProcessGroupOptions::staging_path.
  std::string staging_path = "auto";
  // Tuning of the tcp, gloo and ucx backends; ProcessGroupOptions documents
  // each. A backend that does not use one ignores it; one it uses refuses a
  // bad value with InvalidArgument naming the option and the value.
  int channels = 0;
  size_t channel_min_slice_bytes = kDefaultChannelMinSliceBytes;
  int64_t gloo_native_min_bytes = kAutomatic;
  std::string gloo_transport = "tcp";
  int64_t tcp_socket_buffer_bytes = kAutomatic;
};

// The address this process' collective endpoints listen on and advertise
// (Gloo's device, Loom's TCP transport): env LOOM_COLLECTIVES_HOST, else
// 127.0.0.1. Agents set it to their node's address for ranks of multi-node
// jobs.
std::string CollectivesHost();

using BackendFactory =
    std::function<absl::StatusOr<std::shared_ptr<Backend>>(const BackendContext&)>;

// Registers a backend under `name` (e.g. "gloo"). A name "cuda:<backend>"
// (e.g. "cuda:gloo") is the CUDA variant of <backend>: a spec entry
// "cuda:<backend>" selects it (process_group.h). Returns true (for static init).
bool RegisterBackend(absl::string_view name, BackendFactory factory);
// Creates a registered backend; NotFound lists the registered names.
absl::StatusOr<std::shared_ptr<Backend>> CreateBackend(absl::string_view name,
                                                       const BackendContext& ctx);
std::vector<std::string> RegisteredBackends();

}  // namespace loom::collectives
