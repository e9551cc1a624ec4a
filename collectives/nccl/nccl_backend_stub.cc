// Built without the CUDA toolkit: backend "nccl" exists but is unavailable.
#include "collectives/nccl/nccl_backend.h"

namespace loom::collectives::nccl {

absl::StatusOr<std::shared_ptr<Backend>> NcclBackend::Create(const BackendContext&) {
  return absl::UnavailableError("nccl: Loom was built without the CUDA toolkit");
}

namespace {
const bool kRegistered = RegisterBackend("nccl", NcclBackend::Create);
}  // namespace

}  // namespace loom::collectives::nccl
