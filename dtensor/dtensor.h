// The eager DTensor API: a small value type (local tensor + global shape +
// spec) and the calls that move between full, local and distributed forms.
//
//   MeshShape shape{{"dp", "tp"}, {2, 2}};
//   LOOM_ASSIGN_OR_RETURN(auto mesh, DeviceMesh::Create(world, shape));
//   LOOM_ASSIGN_OR_RETURN(DTensorSpec spec, ParseSpec("S(0),S(1)", shape));
//   LOOM_ASSIGN_OR_RETURN(DTensor x, Distribute(full, spec, *mesh));
//   LOOM_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, replicated_on_tp, *mesh));
//   LOOM_ASSIGN_OR_RETURN(Tensor back, FullTensor(y, *mesh));   // == full
//
// Distribute's source of truth: by default (src_rank = -1) every rank's own
// `full` tensor; no communication happens and ranks are trusted to pass the
// same values. With src_rank = r, world rank r's `full` is broadcast first
// (every rank passes a tensor of the same shape and dtype; the contents of
// the others are ignored). A Partial placement is produced from the full
// value: P(sum) puts it on coordinate 0 and zeros elsewhere, P(avg) on every
// coordinate.
//
// Every call that communicates is collective over the mesh (see
// Redistribute). FromLocal/ToLocal never communicate.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "dtensor/device_mesh.h"
#include "dtensor/redistribute.h"
#include "dtensor/spec.h"

namespace loom::dtensor {

struct DTensor {
  Tensor local;                      // this rank's block (contiguous or a view)
  std::vector<int64_t> global_shape;
  DTensorSpec spec;

  DType dtype() const { return local.dtype(); }
  int ndim() const { return static_cast<int>(global_shape.size()); }
  std::string DebugString() const;  // "dtensor f32[7, 5] [tp=S(0)] local f32[4, 5] cpu"
};

// Wraps this rank's block, checking its shape against LocalShape (no comm).
absl::StatusOr<DTensor> FromLocal(const Tensor& local, const std::vector<int64_t>& global_shape,
                                  const DTensorSpec& spec, const DeviceMesh& mesh);
inline const Tensor& ToLocal(const DTensor& t) { return t.local; }

struct DistributeOptions {
  int src_rank = -1;  // -1: each rank's own `full`; else broadcast from this world rank
};
absl::StatusOr<DTensor> Distribute(const Tensor& full, const DTensorSpec& spec, const DeviceMesh& mesh,
                                   DistributeOptions options = {});

// The full (replicated) tensor on every rank.
absl::StatusOr<Tensor> FullTensor(const Tensor& local, const std::vector<int64_t>& global_shape,
                                  const DTensorSpec& spec, const DeviceMesh& mesh);
absl::StatusOr<Tensor> FullTensor(const DTensor& t, const DeviceMesh& mesh);

// The same value under `to_spec`.
absl::StatusOr<DTensor> Redistribute(const DTensor& t, const DTensorSpec& to_spec, const DeviceMesh& mesh);

}  // namespace loom::dtensor
