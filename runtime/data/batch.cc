#include "runtime/data/batch.h"

#include "base/rng.h"

namespace loom::runtime::data {

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kCausal: return "causal";
    case Kind::kMlm: return "mlm";
    case Kind::kPairs: return "pairs";
  }
  return "?";
}

const Tensor* Batch::Find(absl::string_view name) const {
  for (const auto& [n, t] : inputs)
    if (n == name) return &t;
  return nullptr;
}

void MaskWindow(const MlmOptions& o, uint64_t seed, uint64_t draw, int64_t vocab, const int32_t* tokens, int64_t T,
                int32_t* x, int32_t* y) {
  const Philox rng(seed ^ 0x6d6c6d5f6d61736bull, draw);
  int64_t selected = 0, smallest = 0;
  float smallest_u = 2.f;
  auto select = [&](int64_t t) {
    const float c = rng.Uniform(3 * t + 1);
    if (c < o.random_fraction) {
      x[t] = static_cast<int32_t>(rng.Bits(3 * t + 2) % static_cast<uint64_t>(vocab));
    } else if (c < o.random_fraction + o.keep_fraction) {
      x[t] = tokens[t];
    } else {
      x[t] = static_cast<int32_t>(o.mask_token);
    }
    y[t] = tokens[t];
  };
  for (int64_t t = 0; t < T; ++t) {
    const float u = rng.Uniform(3 * t);
    if (u < smallest_u) {
      smallest_u = u;
      smallest = t;
    }
    if (u < o.rate) {
      select(t);
      ++selected;
    } else {
      x[t] = tokens[t];
      y[t] = static_cast<int32_t>(o.ignore_index);
    }
  }
  if (selected == 0 && T > 0) select(smallest);
}

}  // namespace loom::runtime::data
