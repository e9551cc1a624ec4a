// DTensor layout vocabulary shared by the eager DTensor API, the compiler's
// sharding propagation, the planner and checkpoints.
//
// A device mesh is an n-dimensional grid of ranks with named dimensions, e.g.
// (dp=2, tp=2). Ranks are laid out row-major: the LAST mesh dimension varies
// fastest, so tp (placed last) groups adjacent ranks, which share a node.
//
// A DTensorSpec gives one Placement per mesh dimension:
//   Replicate()      every rank along that dimension holds the full tensor;
//   Shard(d)         tensor dim d is split in chunks along that mesh dimension
//                    (torch.chunk semantics: chunk = ceil(n / k), the last
//                    chunks may be shorter or empty);
//   Partial(sum|avg) every rank holds a term; the value is their sum (or mean).
// Text forms: "R", "S(0)", "P(sum)", "P(avg)"; a spec prints as
// "[dp=S(0), tp=R]" and parses from that or from "S(0),R".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::dtensor {

enum class PlacementKind { kReplicate, kShard, kPartial };
enum class PartialOp { kSum, kAvg };

struct Placement {
  PlacementKind kind = PlacementKind::kReplicate;
  int dim = -1;                       // kShard only
  PartialOp op = PartialOp::kSum;     // kPartial only

  static Placement Replicate() { return {}; }
  static Placement Shard(int d) { return {PlacementKind::kShard, d, PartialOp::kSum}; }
  static Placement Partial(PartialOp o = PartialOp::kSum) { return {PlacementKind::kPartial, -1, o}; }

  bool is_replicate() const { return kind == PlacementKind::kReplicate; }
  bool is_shard() const { return kind == PlacementKind::kShard; }
  bool is_shard(int d) const { return kind == PlacementKind::kShard && dim == d; }
  bool is_partial() const { return kind == PlacementKind::kPartial; }

  std::string ToString() const;
  bool operator==(const Placement& o) const;
  bool operator!=(const Placement& o) const { return !(*this == o); }
};

absl::StatusOr<Placement> ParsePlacement(absl::string_view text);

// The shape of a mesh: named dimensions and their sizes (no process groups;
// dtensor/device_mesh.h binds one group per dimension).
struct MeshShape {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;

  int ndim() const { return static_cast<int>(sizes.size()); }
  int64_t num_ranks() const;
  // Index of the named dimension, or NotFound naming it.
  absl::StatusOr<int> DimIndex(absl::string_view name) const;
  // Row-major coordinates of `rank` (last dimension fastest).
  std::vector<int64_t> Coordinates(int64_t rank) const;
  int64_t RankAt(const std::vector<int64_t>& coords) const;
  std::string ToString() const;  // "(dp=2, tp=2)"
  // Rejects empty names, duplicates and sizes < 1, naming the field.
  absl::Status Validate() const;
  bool operator==(const MeshShape& o) const { return names == o.names && sizes == o.sizes; }
};

struct DTensorSpec {
  MeshShape mesh;
  std::vector<Placement> placements;  // one per mesh dimension

  static DTensorSpec Replicated(const MeshShape& mesh);
  bool is_replicated() const;
  bool has_partial() const;
  // Checks one placement per mesh dim and shard dims within `ndim` tensor dims.
  absl::Status Validate(int tensor_ndim) const;
  std::string ToString() const;  // "[dp=S(0), tp=R]"
  bool operator==(const DTensorSpec& o) const {
    return mesh == o.mesh && placements == o.placements;
  }
  bool operator!=(const DTensorSpec& o) const { return !(*this == o); }
};

// Parses "S(0),R" or "[dp=S(0), tp=R]" against `mesh`.
absl::StatusOr<DTensorSpec> ParseSpec(absl::string_view text, const MeshShape& mesh);

// Chunk [offset, offset + length) of a dimension of size n split k ways,
// piece i (torch.chunk semantics).
struct Range {
  int64_t offset = 0;
  int64_t length = 0;
};
Range ChunkRange(int64_t n, int64_t k, int64_t i);

// The block of the global tensor held by the rank at `coords`: per tensor dim
// its offset and length. Several mesh dims sharding one tensor dim split it
// in mesh-dim order (the earlier mesh dim is the outer split).
absl::StatusOr<std::vector<Range>> LocalBlock(const std::vector<int64_t>& global_shape,
                                              const DTensorSpec& spec,
                                              const std::vector<int64_t>& coords);
absl::StatusOr<std::vector<int64_t>> LocalShape(const std::vector<int64_t>& global_shape,
                                                const DTensorSpec& spec,
                                                const std::vector<int64_t>& coords);

}  // namespace loom::dtensor
