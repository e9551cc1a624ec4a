// CudaCopier: the Copier for CUDA device buffers.
//
// cudaMemcpyAsync on two streams of the device current on the creating
// thread (one per direction, created blocking, so they order after work on
// the legacy default stream), an event recorded after each copy, and host
// staging memory from cudaHostAlloc (page-locked, grown on demand). Create
// returns Unavailable when there is no CUDA device or Loom was built
// without the CUDA toolkit.
#pragma once

#include <memory>

#include "collectives/staging/copier.h"

namespace loom::collectives::staging {

absl::StatusOr<std::unique_ptr<Copier>> CreateCudaCopier();

}  // namespace loom::collectives::staging
