#include "dtensor/device_mesh.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::dtensor {

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::Create(
    std::shared_ptr<collectives::ProcessGroup> world, const MeshShape& shape, DeviceMeshOptions options) {
  if (world == nullptr) return absl::InvalidArgumentError("device_mesh: world: null process group");
  LOOM_RETURN_IF_ERROR(Annotate(shape.Validate(), "device_mesh"));
  if (shape.ndim() == 0) return absl::InvalidArgumentError("device_mesh: mesh: expected at least one dimension");
  if (world->size() != shape.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat("device_mesh: world size ", world->size(),
                                                   " != product of mesh sizes ", shape.ToString(), " = ",
                                                   shape.num_ranks()));
  }
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh());
  mesh->world_ = std::move(world);
  mesh->shape_ = shape;
  mesh->options_ = options;
  mesh->coords_ = shape.Coordinates(mesh->world_->rank());
  mesh->groups_.resize(shape.ndim());
  const int64_t n = shape.num_ranks();
  for (int m = 0; m < shape.ndim(); ++m) {
    // One group per combination of the other coordinates: enumerate the ranks
    // whose coordinate m is 0, in increasing order (row-major).
    for (int64_t r = 0; r < n; ++r) {
      std::vector<int64_t> c = shape.Coordinates(r);
      if (c[m] != 0) continue;
      std::vector<int> ranks;
      for (int64_t j = 0; j < shape.sizes[m]; ++j) {
        c[m] = j;
        ranks.push_back(static_cast<int>(shape.RankAt(c)));
      }
      LOOM_ASSIGN_OR_RETURN(auto g, mesh->world_->NewGroup(ranks));
      if (g != nullptr) mesh->groups_[m] = std::move(g);
    }
    if (mesh->groups_[m] == nullptr || mesh->groups_[m]->rank() != mesh->coords_[m]) {
      return absl::InternalError(absl::StrCat("device_mesh: rank ", mesh->rank(), " found no group for dimension '",
                                              shape.names[m], "'"));
    }
  }
  return mesh;
}

absl::StatusOr<int> DeviceMesh::Dim(absl::string_view name, absl::string_view what) const {
  auto idx = shape_.DimIndex(name);
  if (!idx.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": name: ", idx.status().message()));
  return *idx;
}

absl::StatusOr<int64_t> DeviceMesh::coord(absl::string_view name) const {
  LOOM_ASSIGN_OR_RETURN(int m, Dim(name, "device_mesh.coord"));
  return coords_[m];
}

absl::StatusOr<collectives::ProcessGroup*> DeviceMesh::group(absl::string_view name) const {
  LOOM_ASSIGN_OR_RETURN(int m, Dim(name, "device_mesh.group"));
  return groups_[m].get();
}

}  // namespace loom::dtensor
