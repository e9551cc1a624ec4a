// Collective operation names, reduction operators and the per-call options.
//
// Every collective takes an options struct carrying its timeout (the op's
// deadline is its start time + timeout). Defaults follow c10d: root 0, sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/dtype.h"

namespace loom::collectives {

enum class ReduceOp : uint8_t { kSum, kAvg, kMin, kMax, kProduct };
absl::string_view ReduceOpName(ReduceOp op);  // "sum", "avg", ...

enum class OpType : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,      // into a list of per-rank tensors (sizes may differ per rank)
  kAllGatherInto,  // into one flat tensor of size * input.numel()
  kReduceScatter,  // from a list of per-rank tensors (sizes may differ per rank)
  kReduceScatterFrom,  // from one flat tensor of size * output.numel()
  kAllToAll,
  kGather,
  kScatter,
  kSend,
  kRecv,
  kBarrier,
};
inline constexpr OpType kAllOpTypes[] = {
    OpType::kAllReduce, OpType::kBroadcast,     OpType::kReduce,  OpType::kAllGather,
    OpType::kAllGatherInto, OpType::kReduceScatter, OpType::kReduceScatterFrom,
    OpType::kAllToAll,  OpType::kGather,        OpType::kScatter, OpType::kSend,
    OpType::kRecv,      OpType::kBarrier};
absl::string_view OpTypeName(OpType op);  // "all_reduce", ...

inline constexpr absl::Duration kDefaultTimeout = absl::Minutes(5);

struct CollectiveOptions {
  absl::Duration timeout = kDefaultTimeout;
};
// How a staging backend (collectives/staging) fills and drains the host
// buffer of an all_reduce in pieces while the algorithm runs. Offsets and
// sizes are bytes of the buffer. `need` announces a range the algorithm
// will read (in the order it will read them; it must not block),
// `ready` returns once a range holds this rank's input (or the copy's
// error), and `done` reports a range that holds the result. An algorithm
// announces and waits for every byte before it reads it, and reports every
// byte once, after its last write there. Calls may come from several threads.
struct StageHooks {
  std::function<void(size_t offset, size_t bytes)> need;
  std::function<absl::Status(size_t offset, size_t bytes)> ready;
  std::function<void(size_t offset, size_t bytes)> done;
  // Bytes per piece (whole elements are taken): the ring moves the buffer in
  // messages of this size and announces, waits for and reports it in such
  // pieces. 0: the ring's own message size.
  size_t piece_bytes = 0;
};

struct AllReduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
  // Set only by a staging backend, and only for an inner backend whose
  // TakesStageHooks() is true; the others refuse it.
  std::shared_ptr<const StageHooks> stage;
};
struct BroadcastOptions : CollectiveOptions {
  int root = 0;
};
struct ReduceOptions : CollectiveOptions {
  int root = 0;
  ReduceOp op = ReduceOp::kSum;
};
struct AllGatherOptions : CollectiveOptions {};
struct ReduceScatterOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
};
// Splits count rows along dim 0 (elements for 1-D tensors). Empty: equal splits.
struct AllToAllOptions : CollectiveOptions {
  std::vector<int64_t> input_split_sizes;
  std::vector<int64_t> output_split_sizes;
};
struct GatherOptions : CollectiveOptions {
  int root = 0;
};
struct ScatterOptions : CollectiveOptions {
  int root = 0;
};
// User tags are < 2^32 and match send to recv per (peer, tag) in FIFO order.
struct SendRecvOptions : CollectiveOptions {
  uint32_t tag = 0;
};
struct BarrierOptions : CollectiveOptions {};

}  // namespace loom::collectives
