// The shared op-consistency check (CONVENTIONS 7: every op joins one test).
//
// For every registered op and each of its ConsistencyCases:
//   1. the case's inputs are drawn from its InputSpecs (seeded, reproducible);
//   2. the reference runs in f64 and is the yardstick;
//   3. every fast kernel for a device present here runs in each dtype it
//      advertises, and each output must be within the dtype's bound of the
//      reference, as ||out - ref|| / ||ref||;
//   4. when the op has a gradient rule, the rule's gradients (run eagerly on the
//      reference in f64) must match central finite differences of
//      L = sum_j <W_j, out_j> for random W_j, on up to `max_probes` elements per
//      input; and the rule run on the fast kernels must match the f64 gradients
//      within the kernel dtype's bound.
// An op with no case, or with neither a gradient rule nor a reason for its
// absence, is a failure. The one exception: a backward op whose
// no_grad_reason is "backward op of X" may have no case of its own when X has
// gradient cases, since those run it (kernel and reference) on consistent
// inputs.
#pragma once

#include <string>
#include <vector>

#include "kernels/registry.h"

namespace loom::kernels::testing {

struct CaseReport {
  std::string op;
  std::string case_name;
  double forward_error = 0;   // worst over kernels, dtypes and outputs
  double grad_fd_error = -1;  // reference grads vs finite differences; -1: no grad check
  double grad_kernel_error = -1;
  std::vector<std::string> failures;
};

struct Bounds {
  double f64 = 1e-10, f32 = 2e-5, f16 = 2e-3, bf16 = 1.6e-2;
  double grad_fd = 1e-5;  // finite differences in f64
  int max_probes = 48;
  double For(DType t) const;
};

// Draws the inputs of `c` for dtype promotion `float_dtype` (floating inputs
// are generated in f64 and cast). Deterministic in (op, case, seed).
std::vector<Tensor> MakeInputs(const std::string& op, const ConsistencyCase& c, DType float_dtype,
                               uint64_t seed = 1);

// `seed` picks the input draw (tests may check several).
CaseReport CheckCase(const OpDef& def, const ConsistencyCase& c, const Bounds& bounds = {}, uint64_t seed = 1);

// Reports structural failures of `def` (no cases, no grad rule and no reason).
std::vector<std::string> CheckDefinition(const OpDef& def);

}  // namespace loom::kernels::testing
