// Helpers for the kernels/cpu tests: seeded random tensors, running ops
// through the registry, and matchers on error messages.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/rng.h"
#include "base/tensor.h"
#include "gtest/gtest.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::testing {

// Uniform in [lo, hi), deterministic in seed.
inline Tensor Rand(std::vector<int64_t> shape, DType dtype = DType::kF32, uint64_t seed = 1, double lo = -1,
                   double hi = 1) {
  Tensor t = Tensor::MustEmpty(shape, dtype);
  Philox rng(seed, 7);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, lo + (hi - lo) * rng.Uniform(i));
  return t;
}

// Runs a single-output op; fails the test (and returns an undefined tensor) on error.
inline Tensor Eval(const std::string& op, std::vector<Tensor> inputs, const kernels::Attrs& attrs = {},
                   kernels::Impl impl = kernels::Impl::kKernel) {
  auto out = kernels::RunOp(op, inputs, attrs, impl);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  if (!out.ok() || out->empty()) return Tensor();
  return (*out)[0];
}

// Kernel vs reference of op on the same inputs.
inline double KernelVsReference(const std::string& op, std::vector<Tensor> inputs, const kernels::Attrs& attrs = {}) {
  Tensor k = Eval(op, inputs, attrs, kernels::Impl::kKernel);
  Tensor r = Eval(op, inputs, attrs, kernels::Impl::kReference);
  if (!k.defined() || !r.defined()) return INFINITY;
  EXPECT_EQ(k.shape(), r.shape()) << op;
  EXPECT_EQ(k.dtype(), r.dtype()) << op;
  return RelativeError(k, r);
}

inline double Tol(DType t) { return t == DType::kF64 ? 1e-12 : t == DType::kBF16 ? 1e-2 : 2e-6; }

// A host tensor that claims to live on cuda:0 (never dereferenced: kernels
// must reject it before touching its memory).
inline Tensor FakeCuda(std::vector<int64_t> shape, DType dtype = DType::kF32) {
  static char dummy[64];
  return Tensor::Wrap(dummy, shape, dtype, Device::CUDA(0));
}

// InvalidArgument whose message contains `needle`.
#define EXPECT_INVALID(status_expr, needle)                                                     \
  do {                                                                                          \
    absl::Status _s = (status_expr);                                                            \
    EXPECT_EQ(_s.code(), absl::StatusCode::kInvalidArgument) << _s;                             \
    EXPECT_NE(std::string(_s.message()).find(needle), std::string::npos)                        \
        << "message '" << _s.message() << "' lacks '" << needle << "'";                         \
  } while (0)

}  // namespace loom::kernels::cpu::testing
