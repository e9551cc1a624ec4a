#include "base/rng.h"

#include <cmath>

namespace loom {

double Philox::Normal(uint64_t i) const {
  uint32_t b[4];
  Block(i, b);
  double u1 = (b[0] + 1.0) / 4294967297.0;  // (0, 1)
  double u2 = b[1] / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace loom
