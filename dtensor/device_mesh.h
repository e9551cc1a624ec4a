// DeviceMesh: an n-d grid of ranks with named dimensions over a world
// ProcessGroup, with one process subgroup per mesh dimension.
//
//   MeshShape shape{{"dp", "tp"}, {2, 2}};
//   LOOM_ASSIGN_OR_RETURN(auto mesh, DeviceMesh::Create(world, shape));
//   mesh->coords();                 // this rank's coordinates, e.g. {1, 0}
//   LOOM_ASSIGN_OR_RETURN(ProcessGroup* tp, mesh->group("tp"));
//
// Layout: world rank r sits at MeshShape::Coordinates(r) (row-major, last
// dimension fastest). The group of mesh dimension m on a rank holds the ranks
// whose coordinates differ from its own only in coordinate m, ordered by that
// coordinate, so group rank == coords()[m].
//
// Create is collective over `world`: every world rank calls it with the same
// shape. It creates the subgroups dimension by dimension, and within a
// dimension in row-major order of the other coordinates (ProcessGroup::NewGroup
// on every rank for every group, as NewGroup requires).
//
// Errors (InvalidArgument): an invalid shape (MeshShape::Validate), a world
// size != the product of the mesh sizes; group(name) of an unknown dimension.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/process_group.h"
#include "dtensor/spec.h"

namespace loom::dtensor {

struct DeviceMeshOptions {
  // Deadline for each collective Redistribute issues on this mesh (every Wait
  // is bounded by it; a stuck peer surfaces as DeadlineExceeded).
  absl::Duration collective_timeout = absl::Seconds(60);
};

class DeviceMesh {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> Create(
      std::shared_ptr<collectives::ProcessGroup> world, const MeshShape& shape,
      DeviceMeshOptions options = {});

  const MeshShape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int rank() const { return world_->rank(); }
  // This rank's coordinates, one per mesh dimension.
  const std::vector<int64_t>& coords() const { return coords_; }
  // The coordinate along the named dimension (InvalidArgument if unknown).
  absl::StatusOr<int64_t> coord(absl::string_view name) const;

  // The subgroup of the named dimension (InvalidArgument if unknown).
  absl::StatusOr<collectives::ProcessGroup*> group(absl::string_view name) const;
  // The subgroup of mesh dimension `dim` (0 <= dim < ndim(); checked by callers).
  collectives::ProcessGroup* group(int dim) const { return groups_[dim].get(); }
  collectives::ProcessGroup* world() const { return world_.get(); }
  const DeviceMeshOptions& options() const { return options_; }

 private:
  DeviceMesh() = default;
  absl::StatusOr<int> Dim(absl::string_view name, absl::string_view what) const;

  std::shared_ptr<collectives::ProcessGroup> world_;
  MeshShape shape_;
  std::vector<int64_t> coords_;
  std::vector<std::unique_ptr<collectives::ProcessGroup>> groups_;
  DeviceMeshOptions options_;
};

}  // namespace loom::dtensor
