#include "kernels/cpu/nn/nn_test_util.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/rng.h"

namespace loom::kernels::cpu::nn::testing {

std::string ErrorOf(const absl::Status& s) { return s.ok() ? "" : std::string(s.message()); }

Tensor RandomTensor(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::MustEmpty(shape, dtype);
  Philox rng(seed, 99);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, lo + (hi - lo) * rng.Uniform(i));
  return t;
}

}  // namespace loom::kernels::cpu::nn::testing
