// Test helpers for kernels/cpu/nn (testonly). Consistency checks go through
// the shared kernels/testing/consistency.h.
#pragma once

#include <string>
#include <vector>

#include "kernels/registry.h"

namespace loom::kernels::cpu::nn::testing {

// Tensor of `shape` with uniform values in [lo, hi) from a fixed seed.
Tensor RandomTensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1, double hi = 1);

// The message of a failed status (empty when ok).
std::string ErrorOf(const absl::Status& s);

}  // namespace loom::kernels::cpu::nn::testing
