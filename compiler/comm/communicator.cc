#include "compiler/comm/communicator.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::comm {

absl::StatusOr<ReduceKind> ParseReduceKind(absl::string_view s) {
  if (s == "sum") return ReduceKind::kSum;
  if (s == "avg") return ReduceKind::kAvg;
  if (s == "max") return ReduceKind::kMax;
  if (s == "min") return ReduceKind::kMin;
  return absl::InvalidArgumentError(absl::StrCat("reduce: expected sum, avg, max or min, got '", s, "'"));
}

absl::Status SingleRankCommunicator::AllReduce(const Tensor& in, Tensor& out, ReduceKind) {
  return out.CopyFrom(in);
}
absl::Status SingleRankCommunicator::AllGather(const Tensor& in, Tensor& out, int) { return out.CopyFrom(in); }
absl::Status SingleRankCommunicator::ReduceScatter(const Tensor& in, Tensor& out, int, ReduceKind) {
  return out.CopyFrom(in);
}

}  // namespace loom::compiler::comm
