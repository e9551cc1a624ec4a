// Built without the CUDA toolkit: there is no CUDA copier.
#include "collectives/staging/cuda_copier.h"

namespace loom::collectives::staging {

absl::StatusOr<std::unique_ptr<Copier>> CreateCudaCopier() {
  return absl::UnavailableError("cuda:gloo: Loom was built without the CUDA toolkit");
}

}  // namespace loom::collectives::staging
