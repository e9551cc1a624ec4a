#include "collectives/types.h"

namespace loom::collectives {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

absl::string_view OpTypeName(OpType op) {
  switch (op) {
    case OpType::kAllReduce: return "all_reduce";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kReduce: return "reduce";
    case OpType::kAllGather: return "all_gather";
    case OpType::kAllGatherInto: return "all_gather_into";
    case OpType::kReduceScatter: return "reduce_scatter";
    case OpType::kReduceScatterFrom: return "reduce_scatter_from";
    case OpType::kAllToAll: return "all_to_all";
    case OpType::kGather: return "gather";
    case OpType::kScatter: return "scatter";
    case OpType::kSend: return "send";
    case OpType::kRecv: return "recv";
    case OpType::kBarrier: return "barrier";
  }
  return "?";
}

}  // namespace loom::collectives
