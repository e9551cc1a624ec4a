// Redistribute: change the layout of a distributed tensor on a DeviceMesh.
//
//   // Each rank holds its block of a [7, 5] tensor sharded on dim 0 over "tp".
//   LOOM_ASSIGN_OR_RETURN(Tensor full_local,
//       Redistribute(block, {7, 5}, from /*[tp=S(0)]*/, to /*[tp=R]*/, *mesh));
//
// Collective over the mesh: every rank calls it with the same global shape,
// specs and dtype, and its own local tensor (shape LocalShape(global, from,
// mesh.coords())). Returns this rank's local tensor under `to`. The steps and
// their order are those of PlanRedistribute (redistribute_plan.h): one
// collective per changed mesh dim (all_gather / all_reduce / reduce_scatter /
// all_to_all), local slicing where no data must move.
//
// Uneven shards follow torch.chunk (chunk = ceil(n / k); the last chunks may
// be short or empty): each collective pads every block to the chunk size and
// the result is trimmed. A collective whose padded block is empty is skipped
// on every rank of its group (they agree: the padded size is the same there).
// Mesh dims of size 1 never communicate.
//
// Dtypes: any the process group's backend supports for the ops used
// (gloo: f32, f64, bf16, f16, i32, i64 for everything; bool only without
// partial placements). P(avg) on integer dtypes divides with truncation.
//
// Errors (InvalidArgument, naming the argument): undefined or non-CPU local,
// negative global_shape entries, specs invalid for the tensor rank or over a
// mesh other than mesh.shape(), a local shape that differs from the one
// `from_spec` gives this rank. Collective failures come back with the step
// named; every wait is bounded by mesh.options().collective_timeout.
//
// The result may share storage with `local` when no step changes the data.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "dtensor/device_mesh.h"
#include "dtensor/redistribute_plan.h"
#include "dtensor/spec.h"

namespace loom::dtensor {

absl::StatusOr<Tensor> Redistribute(const Tensor& local, const std::vector<int64_t>& global_shape,
                                    const DTensorSpec& from_spec, const DTensorSpec& to_spec,
                                    const DeviceMesh& mesh);

// Checks that `local` is a valid local tensor of `global_shape` under `spec`
// on this rank of `mesh`; `arg` names the tensor in messages.
absl::Status CheckLocal(const Tensor& local, const std::vector<int64_t>& global_shape, const DTensorSpec& spec,
                        const DeviceMesh& mesh, absl::string_view arg, absl::string_view spec_arg);

}  // namespace loom::dtensor
