// Channels: extra, independent connections between the ranks of a group, so
// that one large collective can be cut into slices that run concurrently, each
// on its own thread and its own transport (NCCL's "channels" idea on CPUs).
//
// Why: one TCP stream (or one UCX worker) is driven by one thread, which does
// all the kernel copies, shared-memory copies and reductions of the op, so a
// large all_reduce uses one core per rank however many are idle. With K
// channels a message of B bytes runs as K independent collectives of B/K
// bytes, spreading copies and reductions over K cores per rank.
//
// The configuration must agree across the group: rank 0 decides it
// (AgreeChannelConfig) from its ChannelOptions and publishes it in the store;
// the other ranks take the published value whatever their own options say.
// Channel count: ChannelOptions::channels (1..8; ProcessGroupOptions::channels)
// if non-zero, else usable CPUs (rank 0's affinity mask) / (2 * group size),
// clamped to [1, 4] (1 on the 2-core development machine: slices would only
// fight for the same cores). Channel 0 is the backend's own transport.
//
// Usage (AlgorithmBackend does this for all_reduce):
//   ChannelPool pool(*ConnectExtraChannels(store, rank, size, timeout, options, connect));
//   int slices = pool.Slices(bytes);
//   absl::Status s = pool.Run(slices, transport0, [&](int k, Transport* t) {...});
// Run executes slice 0 on the calling thread and slice k on channel k's
// thread; it returns when every slice is done (so buffers may be released).
// On the first failure it aborts every channel, so slices blocked on healthy
// peers wake up at once, and returns the first error.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectives/store/store.h"
#include "collectives/transport/transport.h"

namespace loom::collectives {

// Smallest slice worth its own channel by default: below this, per-message
// latency and thread hand-off cost more than the parallel copies gain. Tests
// lower it with ChannelOptions::min_slice_bytes.
inline constexpr size_t kMinChannelSliceBytes = 512 << 10;

// What a rank asks for (from BackendContext::channels and
// ::channel_min_slice_bytes). Only rank 0's options count; every rank
// validates its own (InvalidArgument naming the option and the value).
struct ChannelOptions {
  int channels = 0;  // 1..8, or 0: automatic (see the header comment)
  size_t min_slice_bytes = kMinChannelSliceBytes;  // > 0
};

// The agreed configuration.
struct ChannelConfig {
  int channels = 1;
  size_t min_slice_bytes = kMinChannelSliceBytes;
};

// How many slices a message of `bytes` runs as (1 = run unsliced). Same on
// every rank for the same arguments.
int SliceCount(size_t bytes, const ChannelConfig& c);

// Rank 0 picks the configuration from `options` (see the header comment) and
// publishes it under "channels"; every rank returns the published value.
absl::StatusOr<ChannelConfig> AgreeChannelConfig(store::Store& store, int rank, int size, absl::Duration timeout,
                                                 const ChannelOptions& options);

// Store for channel k (k >= 1): keys under "ch<k>/" of `store`.
std::shared_ptr<store::Store> ChannelStore(std::shared_ptr<store::Store> store, int k);

// Agrees on the configuration (AgreeChannelConfig) and connects channels
// 1..K-1 with `connect` (called with each channel's store). Empty when K == 1.
using TransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<transport::Transport>>(std::shared_ptr<store::Store>)>;
struct ExtraChannels {
  ChannelConfig config;
  std::vector<std::unique_ptr<transport::Transport>> transports;  // channels 1..K-1
};
absl::StatusOr<ExtraChannels> ConnectExtraChannels(std::shared_ptr<store::Store> store, int rank, int size,
                                                   absl::Duration timeout, const ChannelOptions& options,
                                                   const TransportFactory& connect);

class ChannelPool {
 public:
  // `extra.transports` are channels 1..K-1 (may be empty: no threads).
  explicit ChannelPool(ExtraChannels extra);
  ~ChannelPool();
  ChannelPool(const ChannelPool&) = delete;
  ChannelPool& operator=(const ChannelPool&) = delete;

  int channels() const { return 1 + static_cast<int>(workers_.size()); }
  // Slices for a message of `bytes` (SliceCount with this pool's config).
  int Slices(size_t bytes) const { return SliceCount(bytes, config_); }
  // Runs fn(k, transport of channel k) for k in [0, slices); slices <= channels().
  // `channel0` is the backend's own transport.
  absl::Status Run(int slices, transport::Transport* channel0,
                   const std::function<absl::Status(int, transport::Transport*)>& fn);
  // Aborts channels 1..K-1 (the backend aborts channel 0 itself).
  void AbortExtra(const absl::Status& reason);

 private:
  struct Worker {
    std::unique_ptr<transport::Transport> transport;
    absl::Mutex mu;
    std::function<absl::Status()> job;  // guarded by mu
    bool has_job = false;               // guarded by mu
    bool done = false;                  // guarded by mu
    bool stop = false;                  // guarded by mu
    absl::Status status;                // guarded by mu
    std::thread thread;
  };
  void Loop(Worker* w);
  ChannelConfig config_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace loom::collectives
