#include "dtensor/dtensor.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::dtensor {

std::string DTensor::DebugString() const {
  return absl::StrCat("dtensor ", DTypeName(dtype()), ShapeToString(global_shape), " ", spec.ToString(),
                      " local ", local.DebugString());
}

absl::StatusOr<DTensor> FromLocal(const Tensor& local, const std::vector<int64_t>& global_shape,
                                  const DTensorSpec& spec, const DeviceMesh& mesh) {
  LOOM_RETURN_IF_ERROR(CheckLocal(local, global_shape, spec, mesh, "local", "spec"));
  return DTensor{local, global_shape, spec};
}

absl::StatusOr<DTensor> Distribute(const Tensor& full, const DTensorSpec& spec, const DeviceMesh& mesh,
                                   DistributeOptions options) {
  if (!full.defined()) return absl::InvalidArgumentError("full: undefined tensor");
  std::vector<int64_t> shape(full.shape().begin(), full.shape().end());
  Tensor src = full;
  if (options.src_rank >= 0) {
    if (options.src_rank >= mesh.world()->size())
      return absl::InvalidArgumentError(absl::StrCat("options.src_rank: ", options.src_rank, " is not a rank of a ",
                                                     mesh.world()->size(), "-rank world"));
    if (!full.device().is_cpu())
      return absl::InvalidArgumentError(absl::StrCat("full: expected a CPU tensor, got ", full.DebugString()));
    src = full.Clone();
    if (src.numel() > 0) {
      collectives::BroadcastOptions o;
      o.root = options.src_rank;
      o.timeout = mesh.options().collective_timeout;
      auto w = mesh.world()->Broadcast(src, o);
      if (!w.ok()) return Annotate(w.status(), "distribute: broadcast");
      LOOM_RETURN_IF_ERROR(
          Annotate((*w)->Wait(absl::Now() + mesh.options().collective_timeout), "distribute: broadcast"));
    }
  }
  LOOM_RETURN_IF_ERROR(Annotate(spec.Validate(static_cast<int>(shape.size())), "spec"));
  LOOM_ASSIGN_OR_RETURN(Tensor local,
                        Redistribute(src, shape, DTensorSpec::Replicated(mesh.shape()), spec, mesh));
  return DTensor{local, shape, spec};
}

absl::StatusOr<Tensor> FullTensor(const Tensor& local, const std::vector<int64_t>& global_shape,
                                  const DTensorSpec& spec, const DeviceMesh& mesh) {
  return Redistribute(local, global_shape, spec, DTensorSpec::Replicated(mesh.shape()), mesh);
}

absl::StatusOr<Tensor> FullTensor(const DTensor& t, const DeviceMesh& mesh) {
  return FullTensor(t.local, t.global_shape, t.spec, mesh);
}

absl::StatusOr<DTensor> Redistribute(const DTensor& t, const DTensorSpec& to_spec, const DeviceMesh& mesh) {
  LOOM_ASSIGN_OR_RETURN(Tensor local, Redistribute(t.local, t.global_shape, t.spec, to_spec, mesh));
  return DTensor{local, t.global_shape, to_spec};
}

}  // namespace loom::dtensor
