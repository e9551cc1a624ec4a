// Test helpers for SDPA: random inputs and one-call forward/backward per impl.
#pragma once

#include <vector>

#include "base/rng.h"
#include "base/tensor.h"
#include "kernels/sdpa/sdpa.h"

namespace loom::kernels::sdpa::testing {

// Uniform [lo, hi) tensor from Philox(seed, 0).
inline Tensor Random(std::initializer_list<int64_t> shape, DType dt, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = Tensor::MustEmpty(Shape(shape.begin(), shape.end()), dt);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, lo + (hi - lo) * rng.Uniform(i));
  return t;
}

inline Tensor RandomBoolMask(std::initializer_list<int64_t> shape, uint64_t seed, float p_true = 0.6f) {
  Tensor t = Tensor::MustEmpty(Shape(shape.begin(), shape.end()), DType::kBool);
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, rng.Uniform(i) < p_true ? 1.0 : 0.0);
  return t;
}

struct Fwd {
  Tensor out, lse;
};
struct Bwd {
  Tensor dq, dk, dv;
};

inline SdpaParams ParamsFor(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                            const kernels::Attrs& attrs) {
  std::vector<kernels::TensorMeta> m = {kernels::MetaOf(q), kernels::MetaOf(k), kernels::MetaOf(v)};
  if (mask) m.push_back(kernels::MetaOf(*mask));
  auto p = MakeSdpaParams(m, attrs);
  if (!p.ok()) {
    fprintf(stderr, "MakeSdpaParams: %s\n", std::string(p.status().message()).c_str());
    abort();
  }
  return *p;
}

inline Fwd RunFwd(SdpaImpl impl, const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor* mask) {
  Fwd f{Tensor::MustEmpty({p.B, p.H, p.T, p.Dv}, p.dtype), Tensor::MustEmpty({p.B, p.H, p.T}, DType::kF32)};
  absl::Status s = SdpaForward(impl, p, q, k, v, mask, f.out, f.lse);
  if (!s.ok()) {
    fprintf(stderr, "SdpaForward: %s\n", std::string(s.message()).c_str());
    abort();
  }
  return f;
}

inline Bwd RunBwd(SdpaImpl impl, const SdpaParams& p, const Tensor& dout, const Tensor& q, const Tensor& k,
                  const Tensor& v, const Fwd& f, const Tensor* mask) {
  Bwd b{Tensor::MustEmpty({p.B, p.H, p.T, p.D}, p.dtype), Tensor::MustEmpty({p.B, p.Hkv, p.S, p.D}, p.dtype),
        Tensor::MustEmpty({p.B, p.Hkv, p.S, p.Dv}, p.dtype)};
  absl::Status s = SdpaBackward(impl, p, dout, q, k, v, f.out, f.lse, mask, b.dq, b.dk, b.dv);
  if (!s.ok()) {
    fprintf(stderr, "SdpaBackward: %s\n", std::string(s.message()).c_str());
    abort();
  }
  return b;
}

}  // namespace loom::kernels::sdpa::testing
