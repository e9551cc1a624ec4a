// Inputs and f64 references of the row-wise kernels (rowwise_check.h).
#include "compiler/cuda/codegen/rowwise_check.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/rng.h"

namespace loom::compiler::cuda_codegen {

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
  Fill(c.y, s.dtype, n, kNaN);
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
  p.mean = static_cast<float*>(c.mean.data());
  p.rstd = static_cast<float*>(c.rstd.data());
  p.rows = c.rows;
  return p;
}

std::string CheckLn(const LnCase& c) {
  const int64_t C = c.spec.cols;
  const bool bf = c.spec.dtype == DType::kBF16;
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
    const double mean = sum / C;
    double sq = 0;
    for (int64_t j = 0; j < C; ++j) sq += (x[j] - mean) * (x[j] - mean);
    const double rstd = 1.0 / std::sqrt(sq / C + static_cast<float>(c.spec.eps));
    if (!Close(c.mean.Get(r), mean, 1e-5, 1e-5)) return Fail("mean", r, c.mean.Get(r), mean);
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

// ---- cross entropy ----

CeCase MakeCeCase(const CeSpec& s, int64_t rows, uint64_t seed) {
  CeCase c;
  c.spec = s;
  c.rows = rows;
  const int64_t V = s.vocab;
  Philox rng(seed, 0);
  c.logits.Init(s.dtype, rows * V);
  for (int64_t i = 0; i < rows * V; ++i) c.logits.Set(i, 2.0 * rng.Normal(i));
  c.targets.Init(s.target_dtype, rows);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = static_cast<int64_t>(rng.Uniform(rows * V + r) * V) % V;
    if (r % 5 == 3) t = s.ignore_index;
    if (r == 1 && rows > 2) t = V;  // out of range: ignored too
    c.targets.Set(r, static_cast<double>(t));
  }
  Fill(c.dloss, DType::kF32, 1, 1.7);
  Fill(c.lse, DType::kF32, rows, kNaN);
  Fill(c.row_loss, DType::kF32, rows, kNaN);
  Fill(c.loss, DType::kF32, 1, kNaN);
  Fill(c.dlogits, s.dtype, rows * V, kNaN);
  Fill(c.count, DType::kF32, 1, kNaN);
  c.lse_in.Init(DType::kF32, rows);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, c.logits.Get(r * V + j));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(c.logits.Get(r * V + j) - mx);
    c.lse_in.Set(r, mx + std::log(sum));
  }
  return c;
}

CeFwdParams CeFwdParamsFor(CeCase& c) {
  CeFwdParams p;
  p.logits = c.logits.data();
  p.targets = c.targets.data();
  p.lse = static_cast<float*>(c.lse.data());
  p.row_loss = static_cast<float*>(c.row_loss.data());
  p.loss = static_cast<float*>(c.loss.data());
  p.counter = &c.counter;
  p.rows = c.rows;
  return p;
}

CeBwdParams CeBwdParamsFor(CeCase& c) {
  CeBwdParams p;
  p.dloss = static_cast<const float*>(c.dloss.data());
  p.logits = c.logits.data();
  p.targets = c.targets.data();
  p.lse = static_cast<const float*>(c.lse_in.data());
  p.dlogits = c.dlogits.data();
  p.count = static_cast<float*>(c.count.data());
  p.rows = c.rows;
  return p;
}

namespace {
bool ValidTarget(const CeCase& c, int64_t r, int64_t* t) {
  *t = static_cast<int64_t>(c.targets.Get(r));
  return *t != c.spec.ignore_index && *t >= 0 && *t < c.spec.vocab;
}
}  // namespace

std::string CheckCeForward(const CeCase& c) {
  const int64_t V = c.spec.vocab;
  double total = 0;
  int64_t valid = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, c.logits.Get(r * V + j));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(c.logits.Get(r * V + j) - mx);
    const double lse = mx + std::log(sum);
    if (!Close(c.lse.Get(r), lse, 2e-6, 2e-5)) return Fail("lse", r, c.lse.Get(r), lse);
    int64_t t;
    const double rl = ValidTarget(c, r, &t) ? lse - c.logits.Get(r * V + t) : 0.0;
    if (!Close(c.row_loss.Get(r), rl, 1e-5, 5e-5)) return Fail("row_loss", r, c.row_loss.Get(r), rl);
    if (ValidTarget(c, r, &t)) {
      total += rl;
      ++valid;
    }
  }
  const double loss = valid > 0 ? total / valid : 0.0;
  if (!Close(c.loss.Get(0), loss, 1e-5, 1e-5)) return Fail("loss", 0, c.loss.Get(0), loss);
  if (c.counter != 0) return Fail("counter (must be re-armed to 0)", 0, c.counter, 0);
  return "";
}

std::string CheckCeBackward(const CeCase& c) {
  const int64_t V = c.spec.vocab;
  int64_t valid = 0, t;
  for (int64_t r = 0; r < c.rows; ++r) valid += ValidTarget(c, r, &t) ? 1 : 0;
  if (c.count.Get(0) != static_cast<double>(valid)) return Fail("count", 0, c.count.Get(0), valid);
  const bool bf = c.spec.dtype == DType::kBF16;
  const double scale = valid > 0 ? c.dloss.Get(0) / valid : 0.0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const bool ok = ValidTarget(c, r, &t) && valid > 0;
    const double lse = c.lse_in.Get(r);
    for (int64_t j = 0; j < V; ++j) {
      const double want = ok ? scale * (std::exp(c.logits.Get(r * V + j) - lse) - (j == t ? 1.0 : 0.0)) : 0.0;
      const double got = c.dlogits.Get(r * V + j);
      if (!Close(got, want, bf ? 1.0 / 128 : 1e-5, scale * (bf ? 1e-4 : 1e-7)))
        return Fail("dlogits", r * V + j, got, want);
    }
  }
  return "";
}

// ---- AdamW ----

AdamWCase MakeAdamWCase(const AdamWSpec& s, uint64_t seed) {
  AdamWCase c;
  c.spec = s;
  c.numels = {1, 7, 64, 4099, 70000, 131076};
  Philox rng(seed, 0);
  uint64_t k = 0;
  for (size_t t = 0; t < c.numels.size(); ++t) {
    const int64_t n = c.numels[t];
    const DType gdt = t % 2 == 1 ? DType::kBF16 : DType::kF32;
    HostBuf p, g, m, v, sh;
    p.Init(DType::kF32, n);
    g.Init(gdt, n);
    m.Init(DType::kF32, n);
    v.Init(DType::kF32, n);
    for (int64_t i = 0; i < n; ++i) {
      p.Set(i, 0.3 * rng.Normal(k++));
      g.Set(i, 0.05 * rng.Normal(k++));
      m.Set(i, 0.01 * rng.Normal(k++));
      v.Set(i, 1e-4 * std::fabs(rng.Normal(k++)));
    }
    if (t % 3 != 2) Fill(sh, DType::kBF16, n, kNaN);
    c.param0.push_back(p);
    c.m0.push_back(m);
    c.v0.push_back(v);
    c.param.push_back(std::move(p));
    c.grad.push_back(std::move(g));
    c.m.push_back(std::move(m));
    c.v.push_back(std::move(v));
    c.shadow.push_back(std::move(sh));
    c.weight_decay.push_back(t % 2 == 0 ? 0.1 : 0.0);
  }
  Fill(c.lr, DType::kF32, 1, 3e-3);
  Fill(c.step, s.step_dtype, 1, 5);
  Fill(c.grad_norm, DType::kF32, 1, 2.5);
  return c;
}

std::vector<AdamWTensor> AdamWTensorsFor(AdamWCase& c, const std::vector<void*>* dev) {
  std::vector<AdamWTensor> out;
  for (size_t t = 0; t < c.numels.size(); ++t) {
    AdamWTensor e;
    if (dev != nullptr) {
      e.param = static_cast<float*>((*dev)[5 * t]);
      e.grad = (*dev)[5 * t + 1];
      e.m = static_cast<float*>((*dev)[5 * t + 2]);
      e.v = static_cast<float*>((*dev)[5 * t + 3]);
      e.param_bf16 = (*dev)[5 * t + 4];
    } else {
      e.param = static_cast<float*>(c.param[t].data());
      e.grad = c.grad[t].data();
      e.m = static_cast<float*>(c.m[t].data());
      e.v = static_cast<float*>(c.v[t].data());
      e.param_bf16 = c.shadow[t].n > 0 ? c.shadow[t].data() : nullptr;
    }
    e.numel = c.numels[t];
    e.weight_decay = c.weight_decay[t];
    e.grad_bf16 = c.grad[t].dtype == DType::kBF16 ? 1 : 0;
    out.push_back(e);
  }
  return out;
}

std::string CheckAdamW(const AdamWCase& c) {
  const AdamWSpec& s = c.spec;
  const double lr = c.lr.Get(0), step = c.step.Get(0), gn = c.grad_norm.Get(0);
  const double clip = s.max_norm > 0 ? std::min(1.0, s.max_norm / (gn + 1e-6)) : 1.0;
  const double bc1 = 1 - std::pow(s.beta1, step), bc2 = 1 - std::pow(s.beta2, step);
  for (size_t t = 0; t < c.numels.size(); ++t)
    for (int64_t i = 0; i < c.numels[t]; ++i) {
      const double g = c.grad[t].Get(i) * clip;
      const double m = s.beta1 * c.m0[t].Get(i) + (1 - s.beta1) * g;
      const double v = s.beta2 * c.v0[t].Get(i) + (1 - s.beta2) * g * g;
      const double denom = std::sqrt(v) / std::sqrt(bc2) + s.eps;
      const double p = c.param0[t].Get(i) * (1 - lr * c.weight_decay[t]) - lr / bc1 * m / denom;
      // f32 tolerances scaled by the magnitudes of the terms (m and v cancel).
      const double tm = 1e-6 * (std::fabs(s.beta1 * c.m0[t].Get(i)) + std::fabs((1 - s.beta1) * g));
      const double tv = 1e-6 * (s.beta2 * c.v0[t].Get(i) + (1 - s.beta2) * g * g);
      const double tp = 1e-6 * std::fabs(c.param0[t].Get(i)) + lr / bc1 * (2 * tm + 1e-5 * std::fabs(m)) / denom +
                        lr / bc1 * std::fabs(m) * tv / (denom * denom * 2 * std::sqrt(v * bc2) + 1e-30);
      const std::string at = absl::StrCat("tensor ", t, " ");
      if (!Close(c.m[t].Get(i), m, 0, tm + 1e-30)) return at + Fail("m", i, c.m[t].Get(i), m);
      if (!Close(c.v[t].Get(i), v, 0, tv + 1e-30)) return at + Fail("v", i, c.v[t].Get(i), v);
      if (!Close(c.param[t].Get(i), p, 0, tp)) return at + Fail("param", i, c.param[t].Get(i), p);
      if (c.shadow[t].n > 0 && !Close(c.shadow[t].Get(i), c.param[t].Get(i), 1.0 / 256, 0))
        return at + Fail("param_bf16", i, c.shadow[t].Get(i), c.param[t].Get(i));
    }
  return "";
}

}  // namespace loom::compiler::cuda_codegen
