#include "kernels/cpu/nn/nn_test_util.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/rng.h"

namespace loom::nn_testing {
namespace {

uint64_t Hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

Tensor ToDType(const Tensor& t, DType d) { return IsFloating(t.dtype()) ? t.To(d) : t; }

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.GetDouble(i) * b.GetDouble(i);
  return s;
}

}  // namespace

std::string ErrorOf(const absl::Status& s) { return s.ok() ? "" : std::string(s.message()); }

Tensor RandomTensor(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::MustEmpty(shape, dtype);
  Philox rng(seed, 99);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, lo + (hi - lo) * rng.Uniform(i));
  return t;
}

std::vector<Tensor> MakeCaseInputs(const std::string& op, const ops::ConsistencyCase& c, DType dtype,
                                   uint64_t seed) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const ops::InputSpec& spec = c.inputs[i];
    Philox rng(Hash(op + "/" + c.name) ^ seed, i);
    bool floating = IsFloating(spec.meta.dtype);
    Tensor t = Tensor::MustEmpty(spec.meta.shape, floating ? DType::kF64 : spec.meta.dtype);
    if (spec.fill) {
      spec.fill(t, rng);
    } else {
      for (int64_t e = 0; e < t.numel(); ++e) {
        double u = rng.Uniform(e);
        double v = spec.lo + (spec.hi - spec.lo) * u;
        if (!floating) v = std::min(std::floor(v), spec.hi - 1);
        t.SetDouble(e, v);
      }
    }
    out.push_back(ToDType(t, dtype));
  }
  return out;
}

NnCaseReport CheckNnCase(const ops::OpDef& def, const ops::ConsistencyCase& c, uint64_t seed, double fwd_bound,
                         double fd_bound, double kgrad_bound) {
  NnCaseReport r;
  auto fail = [&](std::string m) { r.failures.push_back(absl::StrCat(def.name, "/", c.name, ": ", m)); };
  std::vector<Tensor> in64 = MakeCaseInputs(def.name, c, DType::kF64, seed);
  auto ref = ops::RunOp(def.name, in64, c.attrs, ops::Impl::kReference);
  if (!ref.ok()) {
    fail(absl::StrCat("reference: ", ref.status().message()));
    return r;
  }
  // The reference also runs in f32.
  auto ref32 = ops::RunOp(def.name, MakeCaseInputs(def.name, c, DType::kF32, seed), c.attrs, ops::Impl::kReference);
  if (!ref32.ok()) fail(absl::StrCat("f32 reference: ", ref32.status().message()));

  std::vector<Tensor> in32 = MakeCaseInputs(def.name, c, DType::kF32, seed);
  auto out = ops::RunOp(def.name, in32, c.attrs, ops::Impl::kKernel);
  if (!out.ok()) {
    fail(absl::StrCat("kernel: ", out.status().message()));
    return r;
  }
  for (size_t j = 0; j < out->size(); ++j) {
    if ((*out)[j].shape() != (*ref)[j].shape()) {
      fail(absl::StrCat("output ", j, " shape mismatch"));
      continue;
    }
    double err = RelativeError((*out)[j], (*ref)[j]);
    if (std::isnan(err)) err = INFINITY;
    r.forward_error = std::max(r.forward_error, err);
    if (!(err <= fwd_bound)) fail(absl::StrCat("output ", j, " kernel rel error ", err, " > ", fwd_bound));
    if (ref32.ok()) {
      double e32 = RelativeError((*ref32)[j], (*ref)[j]);
      if (!(e32 <= fwd_bound)) fail(absl::StrCat("output ", j, " f32 reference rel error ", e32));
    }
  }
  if (!def.grad) return r;

  std::vector<int> gouts = c.grad_outputs;
  if (gouts.empty())
    for (size_t j = 0; j < ref->size(); ++j)
      if (IsFloating((*ref)[j].dtype())) gouts.push_back(static_cast<int>(j));
  std::vector<Tensor> w(ref->size());
  for (int j : gouts) w[j] = RandomTensor((*ref)[j].shape(), DType::kF64, Hash(def.name + c.name) + 31 * seed + j);
  auto loss = [&](const std::vector<Tensor>& in) {
    auto o = ops::RunOp(def.name, in, c.attrs, ops::Impl::kReference);
    if (!o.ok()) return double(NAN);
    double s = 0;
    for (int j : gouts) s += Dot((*o)[j], w[j]);
    return s;
  };
  auto grads = ops::EagerGradients(def.name, in64, w, c.attrs, ops::Impl::kReference);
  if (!grads.ok()) {
    fail(absl::StrCat("grad rule: ", grads.status().message()));
    return r;
  }
  r.grad_fd_error = 0;
  for (size_t i = 0; i < in64.size(); ++i) {
    if (!c.inputs[i].differentiable || !IsFloating(c.inputs[i].meta.dtype)) continue;
    const Tensor& g = (*grads)[i];
    if (!g.defined() || g.shape() != in64[i].shape()) {
      fail(absl::StrCat("input ", i, ": missing or misshapen gradient"));
      continue;
    }
    int64_t n = in64[i].numel(), probes = std::min<int64_t>(n, 64);
    double num = 0, den = 0;
    Philox pick(Hash(def.name + "/p/" + c.name) ^ seed, i);
    for (int64_t p = 0; p < probes; ++p) {
      int64_t e = probes == n ? p : static_cast<int64_t>(pick.Bits(p) % n);
      std::vector<Tensor> plus = in64, minus = in64;
      plus[i] = in64[i].Clone();
      minus[i] = in64[i].Clone();
      double x = in64[i].GetDouble(e);
      plus[i].SetDouble(e, x + c.fd_step);
      minus[i].SetDouble(e, x - c.fd_step);
      double fd = (loss(plus) - loss(minus)) / (2 * c.fd_step);
      double an = g.GetDouble(e);
      num += (fd - an) * (fd - an);
      den += fd * fd;
    }
    double err = den == 0 ? std::sqrt(num) : std::sqrt(num / den);
    if (std::isnan(err)) err = INFINITY;
    r.grad_fd_error = std::max(r.grad_fd_error, err);
    if (!(err <= fd_bound)) fail(absl::StrCat("input ", i, ": grad vs finite differences ", err, " > ", fd_bound));
  }
  std::vector<Tensor> w32;
  for (const Tensor& t : w) w32.push_back(t.defined() ? t.To(DType::kF32) : Tensor());
  auto kgrads = ops::EagerGradients(def.name, in32, w32, c.attrs, ops::Impl::kKernel);
  if (!kgrads.ok()) {
    fail(absl::StrCat("grad rule on kernels: ", kgrads.status().message()));
    return r;
  }
  r.grad_kernel_error = 0;
  for (size_t i = 0; i < in64.size(); ++i) {
    if (!c.inputs[i].differentiable || !IsFloating(c.inputs[i].meta.dtype)) continue;
    if (!(*kgrads)[i].defined() || !(*grads)[i].defined()) continue;
    double err = RelativeError((*kgrads)[i], (*grads)[i]);
    if (std::isnan(err)) err = INFINITY;
    r.grad_kernel_error = std::max(r.grad_kernel_error, err);
    if (!(err <= kgrad_bound)) fail(absl::StrCat("input ", i, ": kernel grad rel error ", err, " > ", kgrad_bound));
  }
  return r;
}

}  // namespace loom::nn_testing
