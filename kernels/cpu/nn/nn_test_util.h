// Test helpers for kernels/cpu/nn (testonly).
//
// CheckNnCase runs one ConsistencyCase of a registered op the way the shared
// consistency test does, without depending on it:
//   forward: the f32 CPU kernel against the f64 reference (||out-ref||/||ref||);
//   gradients: EagerGradients on the f64 reference against central finite
//   differences of L = sum_j <W_j, out_j>, and EagerGradients on the f32 kernels
//   against the f64 gradients.
#pragma once

#include <string>
#include <vector>

#include "kernels/registry.h"

namespace loom::nn_testing {

struct NnCaseReport {
  double forward_error = 0;
  double grad_fd_error = -1;      // -1: no gradient check
  double grad_kernel_error = -1;
  std::vector<std::string> failures;
};

// The case's inputs: floating inputs in `dtype`, integer inputs as specified.
std::vector<Tensor> MakeCaseInputs(const std::string& op, const ops::ConsistencyCase& c, DType dtype,
                                   uint64_t seed = 7);

// `seed` varies the drawn inputs (the shared test draws its own).
NnCaseReport CheckNnCase(const ops::OpDef& def, const ops::ConsistencyCase& c, uint64_t seed = 7,
                         double fwd_bound = 2e-5, double fd_bound = 1e-5, double kgrad_bound = 1e-4);

// Tensor of `shape` with uniform values in [lo, hi) from a fixed seed.
Tensor RandomTensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1, double hi = 1);

// The message of a failed status (empty when ok).
std::string ErrorOf(const absl::Status& s);

}  // namespace loom::nn_testing
