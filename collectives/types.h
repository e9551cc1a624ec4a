// Collective operation names, reduction operators and the per-call options.
//
// Every collective takes an options struct carrying its timeout (the op's
// deadline is its start time + timeout). Defaults follow c10d: root 0, sum.
#pragma once

#include <cstdint>
#include <vector>

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
struct AllReduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
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
