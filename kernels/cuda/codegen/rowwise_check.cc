// Inputs and f64 references of the row-wise kernels (rowwise_check.h).
#include "kernels/cuda/codegen/rowwise_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/rng.h"

namespace loom::kernels::cuda::codegen {

void HostBuf::Init(DType t, int64_t count) {
  dtype = t;
  n = count;
  words.assign(static_cast<size_t>((count * DTypeSize(t) + 7) / 8 + 2), 0);
}
int64_t HostBuf::bytes() const { return n * static_cast<int64_t>(DTypeSize(dtype)); }

double HostBuf::Get(int64_t i) const {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(words.data());
  switch (dtype) {
    case DType::kF32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case DType::kBF16: { BF16 b; std::memcpy(&b.bits, p + 2 * i, 2); return static_cast<float>(b); }
    case DType::kI32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::kI64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

void HostBuf::Set(int64_t i, double v) {
  uint8_t* p = reinterpret_cast<uint8_t*>(words.data());
  switch (dtype) {
    case DType::kF32: { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); break; }
    case DType::kBF16: { uint16_t b = BF16::FromFloat(static_cast<float>(v)); std::memcpy(p + 2 * i, &b, 2); break; }
    case DType::kI32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case DType::kI64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p + 8 * i, &x, 8); break; }
    default: break;
  }
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void Fill(HostBuf& b, DType t, int64_t n, double v) {
  b.Init(t, n);
  for (int64_t i = 0; i < n; ++i) b.Set(i, v);
}

// |got - want| <= rel * |want| + abs (NaN fails).
bool Close(double got, double want, double rel, double abs) {
  return std::fabs(got - want) <= rel * std::fabs(want) + abs;
}
std::string Fail(const char* what, int64_t i, double got, double want) {
  return absl::StrCat(what, "[", i, "]: got ", got, " want ", want);
}

}  // namespace

// ---- layernorm ----

LnCase MakeLnCase(const LnSpec& s, int64_t rows, uint64_t seed) {
  LnCase c;
  c.spec = s;
  c.rows = rows;
  const int64_t n = rows * s.cols;
  Philox rng(seed, 0);
  std::vector<LnAddend> ads = s.addends;
  if (ads.empty()) ads.push_back({s.dtype, 0});
  uint64_t k = 0;
  for (const LnAddend& ad : ads) {
    HostBuf b;
    const int64_t m = (ad.period == 0 ? rows : ad.period) * s.cols;
    b.Init(ad.dtype, m);
    const double scale = c.in.empty() ? 1.0 : 0.7;
    for (int64_t i = 0; i < m; ++i) b.Set(i, scale * rng.Normal(k++) + (c.in.empty() ? 0.5 : 0.0));
    c.in.push_back(std::move(b));
  }
  c.gamma.Init(DType::kF32, s.cols);
  c.beta.Init(DType::kF32, s.cols);
  for (int64_t j = 0; j < s.cols; ++j) {
    c.gamma.Set(j, 1.0 + 0.2 * rng.Normal(k + 2 * j));
    c.beta.Set(j, 0.1 * rng.Normal(k + 2 * j + 1));
  }
  Fill(c.h, s.dtype, n, kNaN);
  Fill(c.y, s.y_dtype.value_or(s.dtype), n, kNaN);
  Fill(c.mean, DType::kF32, rows, kNaN);
  Fill(c.rstd, DType::kF32, rows, kNaN);
  return c;
}

LnParams LnParamsFor(LnCase& c) {
  LnParams p;
  for (size_t q = 0; q < c.in.size(); ++q) p.in[q] = c.in[q].data();
  p.gamma = static_cast<const float*>(c.gamma.data());
  p.beta = c.spec.has_bias ? static_cast<const float*>(c.beta.data()) : nullptr;
  p.h = c.spec.addends.empty() ? nullptr : c.h.data();
  p.y = c.y.data();
  p.mean = c.spec.rms ? nullptr : static_cast<float*>(c.mean.data());
  p.rstd = static_cast<float*>(c.rstd.data());
  p.rows = c.rows;
  return p;
}

std::string CheckLn(const LnCase& c) {
  const int64_t C = c.spec.cols;
  const bool bf = c.spec.y_dtype.value_or(c.spec.dtype) == DType::kBF16;  // y's tolerance
  std::vector<double> x(C);
  HostBuf round;
  round.Init(c.spec.dtype, 1);
  for (int64_t r = 0; r < c.rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < C; ++j) {
      const int64_t i = r * C + j;
      if (!c.spec.addends.empty()) {
        // The kernel adds in f32, left to right, and rounds once to the storage dtype.
        float acc = 0.f;
        for (size_t q = 0; q < c.in.size(); ++q) {
          const int64_t P = c.spec.addends[q].period;
          const float v = static_cast<float>(c.in[q].Get((P == 0 ? r : r % P) * C + j));
          acc = q == 0 ? v : acc + v;
        }
        round.Set(0, acc);
        x[j] = round.Get(0);
        if (!(c.h.Get(i) == x[j])) return Fail("h", i, c.h.Get(i), x[j]);
      } else {
        x[j] = c.in[0].Get(i);
      }
      sum += x[j];
    }
    const double mean = c.spec.rms ? 0.0 : sum / C;
    double sq = 0;
    for (int64_t j = 0; j < C; ++j) sq += (x[j] - mean) * (x[j] - mean);
    const double rstd = 1.0 / std::sqrt(sq / C + static_cast<float>(c.spec.eps));
    if (!c.spec.rms && !Close(c.mean.Get(r), mean, 1e-5, 1e-5)) return Fail("mean", r, c.mean.Get(r), mean);
    if (!Close(c.rstd.Get(r), rstd, 1e-4, 0)) return Fail("rstd", r, c.rstd.Get(r), rstd);
    for (int64_t j = 0; j < C; ++j) {
      const int64_t i = r * C + j;
      double want = (x[j] - mean) * rstd * c.gamma.Get(j);
      if (c.spec.has_bias) want += c.beta.Get(j);
      if (!Close(c.y.Get(i), want, bf ? 1.0 / 128 : 2e-5, bf ? 1e-3 : 2e-5)) return Fail("y", i, c.y.Get(i), want);
    }
  }
  return "";
}

// ---- AdamW ----

AdamWCase MakeAdamWCase(const AdamWSpec& s, uint64_t seed, bool lean) {
  AdamWCase c;
  c.spec = s;
  c.numels = {1, 7, 64, 4099, 70000, 131076};
  Philox rng(seed, 0);
  uint64_t k = 0;
  for (size_t t = 0; t < c.numels.size(); ++t) {
    const int64_t n = c.numels[t];
    const DType gdt = t % 2 == 1 ? DType::kBF16 : DType::kF32;
    const bool split = lean && t % 3 != 2, sbf = lean && t != 3;
    const DType sdt = sbf ? DType::kBF16 : DType::kF32;
    HostBuf p, g, m, v, sh;
    g.Init(gdt, n);
    m.Init(sdt, n);
    v.Init(sdt, n);
    std::vector<float> p32(n);
    for (int64_t i = 0; i < n; ++i) {
      p32[i] = static_cast<float>(0.3 * rng.Normal(k++));
      g.Set(i, 0.05 * rng.Normal(k++));
      m.Set(i, 0.01 * rng.Normal(k++));
      v.Set(i, 1e-4 * std::fabs(rng.Normal(k++)));
      c.param0.push_back(p32[i]);
      c.m0.push_back(m.Get(i));
      c.v0.push_back(v.Get(i));
    }
    if (split) {
      p.Init(DType::kBF16, 2 * n);
      SplitF32(p32.data(), n, static_cast<uint16_t*>(p.data()));
    } else {
      p.Init(DType::kF32, n);
      for (int64_t i = 0; i < n; ++i) p.Set(i, p32[i]);
    }
    if (t % 3 != 2 && !split) Fill(sh, DType::kBF16, n, kNaN);
    c.param.push_back(std::move(p));
    c.grad.push_back(std::move(g));
    c.m.push_back(std::move(m));
    c.v.push_back(std::move(v));
    c.shadow.push_back(std::move(sh));
    c.weight_decay.push_back(t % 2 == 0 ? 0.1 : 0.0);
    c.states_bf16.push_back(sbf);
    c.split.push_back(split);
  }
  Fill(c.lr, DType::kF32, 1, 3e-3);
  Fill(c.step, s.step_dtype, 1, 5);
  Fill(c.grad_norm, DType::kF32, 1, 2.5);
  return c;
}

double AdamWCase::ParamAt(size_t t, int64_t i) const {
  if (!split[t]) return param[t].Get(i);
  const uint16_t* planes = static_cast<const uint16_t*>(param[t].data());
  const uint16_t two[2] = {planes[i], planes[numels[t] + i]};
  float x;
  JoinF32(two, 1, &x);
  return x;
}

std::vector<AdamWTensor> AdamWTensorsFor(AdamWCase& c, const std::vector<void*>* dev) {
  std::vector<AdamWTensor> out;
  for (size_t t = 0; t < c.numels.size(); ++t) {
    AdamWTensor e;
    if (dev != nullptr) {
      e.param = (*dev)[5 * t];
      e.grad = (*dev)[5 * t + 1];
      e.m = (*dev)[5 * t + 2];
      e.v = (*dev)[5 * t + 3];
      e.param_bf16 = (*dev)[5 * t + 4];
    } else {
      e.param = c.param[t].data();
      e.grad = c.grad[t].data();
      e.m = c.m[t].data();
      e.v = c.v[t].data();
      e.param_bf16 = c.shadow[t].n > 0 ? c.shadow[t].data() : nullptr;
    }
    e.numel = c.numels[t];
    e.weight_decay = c.weight_decay[t];
    e.grad_bf16 = c.grad[t].dtype == DType::kBF16 ? 1 : 0;
    e.states_bf16 = c.states_bf16[t] ? 1 : 0;
    e.split = c.split[t] ? 1 : 0;
    e.seed = static_cast<uint32_t>(t);
    out.push_back(e);
  }
  return out;
}

namespace {

// The spacing of bf16 values at |x| (the bracket a stochastic rounding of x lands in).
double Bf16Spacing(double x) {
  int e = 0;
  std::frexp(std::fabs(x), &e);
  return std::ldexp(1.0, e - 8);
}

// A bf16-stored state against its f64 value: within one spacing of it (plus
// the f32 tolerance of the value the kernel rounded).
bool StateClose(double got, double want, double tol) {
  return std::fabs(got - want) <= Bf16Spacing(std::fabs(want) + tol) + tol;
}

}  // namespace

std::string CheckAdamW(const AdamWCase& c) {
  const AdamWSpec& s = c.spec;
  const double lr = c.lr.Get(0), step = c.step.Get(0), gn = c.grad_norm.Get(0);
  const double clip = s.max_norm > 0 ? std::min(1.0, s.max_norm / (gn + 1e-6)) : 1.0;
  const double bc1 = 1 - std::pow(s.beta1, step), bc2 = 1 - std::pow(s.beta2, step);
  size_t base = 0;
  for (size_t t = 0; t < c.numels.size(); base += c.numels[t], ++t)
    for (int64_t i = 0; i < c.numels[t]; ++i) {
      const double g = c.grad[t].Get(i) * clip, m0 = c.m0[base + i], v0 = c.v0[base + i], p0 = c.param0[base + i];
      const double m = s.beta1 * m0 + (1 - s.beta1) * g;
      const double v = s.beta2 * v0 + (1 - s.beta2) * g * g;
      const double denom = std::sqrt(v) / std::sqrt(bc2) + s.eps;
      const double p = p0 * (1 - lr * c.weight_decay[t]) - lr / bc1 * m / denom;
      // f32 tolerances scaled by the magnitudes of the terms (m and v cancel).
      const double tm = 1e-6 * (std::fabs(s.beta1 * m0) + std::fabs((1 - s.beta1) * g));
      const double tv = 1e-6 * (s.beta2 * v0 + (1 - s.beta2) * g * g);
      const double tp = 1e-6 * std::fabs(p0) + lr / bc1 * (2 * tm + 1e-5 * std::fabs(m)) / denom +
                        lr / bc1 * std::fabs(m) * tv / (denom * denom * 2 * std::sqrt(v * bc2) + 1e-30);
      const std::string at = absl::StrCat("tensor ", t, " ");
      const double gm = c.m[t].Get(i), gv = c.v[t].Get(i), gp = c.ParamAt(t, i);
      if (c.states_bf16[t] ? !StateClose(gm, m, tm) : !Close(gm, m, 0, tm + 1e-30)) return at + Fail("m", i, gm, m);
      if (c.states_bf16[t] ? !StateClose(gv, v, tv) : !Close(gv, v, 0, tv + 1e-30)) return at + Fail("v", i, gv, v);
      if (!Close(gp, p, 0, tp)) return at + Fail("param", i, gp, p);
      if (c.shadow[t].n > 0 && !Close(c.shadow[t].Get(i), gp, 1.0 / 256, 0))
        return at + Fail("param_bf16", i, c.shadow[t].Get(i), gp);
      if (c.split[t] && !Close(c.param[t].Get(i), gp, 1.0 / 256, 0))  // the hi plane: the bf16 weight
        return at + Fail("param hi", i, c.param[t].Get(i), gp);
    }
  return "";
}

}  // namespace loom::kernels::cuda::codegen
