// Gradient bucketing: merges the all_reduce(sum) nodes of one group (the dp
// gradient all-reduces that sharding propagation inserts) into size-bounded
// buckets, as DDP does: flatten each member, concat, ONE all_reduce, then
// slice and reshape the members back. A bucket is emitted as soon as it is
// full (so it runs while the rest of the backward pass remains), or just
// before the first node that reads one of its members, so no use moves.
//
//   BucketOptions o;  o.group = "dp";  o.bucket_bytes = 25 << 20;
//   LOOM_ASSIGN_OR_RETURN(BucketStats s, BucketAllReduces(local, o));
//
// Only f32 all_reduce(sum) nodes of `group` are merged; a bucket of one node
// is left as it is. Results are elementwise identical (a sum is a sum).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::spmd {

struct BucketOptions {
  std::string group = "dp";
  int64_t bucket_bytes = 25 << 20;
};

struct BucketStats {
  int all_reduces_before = 0;
  int all_reduces_after = 0;
};

absl::StatusOr<BucketStats> BucketAllReduces(ir::Graph& g, const BucketOptions& options = {});

}  // namespace loom::compiler::spmd
