#include "kernels/testing/consistency.h"

#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"

namespace loom::kernels::testing {
namespace {

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

Tensor Convert(const Tensor& t, DType to) {
  if (!IsFloating(t.dtype())) return t;
  return t.To(to);
}

std::vector<Tensor> ConvertAll(const std::vector<Tensor>& ts, DType to) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(Convert(t, to));
  return out;
}

bool IsFloatOutput(const Tensor& t) { return IsFloating(t.dtype()); }

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.GetDouble(i) * b.GetDouble(i);
  return s;
}

}  // namespace

double Bounds::For(DType t) const {
  switch (t) {
    case DType::kF64: return f64;
    case DType::kF32: return f32;
    case DType::kF16: return f16;
    case DType::kBF16: return bf16;
    default: return 0;
  }
}

std::vector<Tensor> MakeInputs(const std::string& op, const ConsistencyCase& c, DType float_dtype,
                               uint64_t seed) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const InputSpec& spec = c.inputs[i];
    Philox rng(HashName(op + "/" + c.name) ^ seed, i);
    bool floating = IsFloating(spec.meta.dtype);
    Tensor t = Tensor::MustEmpty(spec.meta.shape, floating ? DType::kF64 : spec.meta.dtype);
    if (spec.fill) {
      spec.fill(t, rng);
    } else {
      for (int64_t e = 0; e < t.numel(); ++e) {
        double u = rng.Uniform(e);
        if (floating) {
          t.SetDouble(e, spec.lo + (spec.hi - spec.lo) * u);
        } else if (spec.meta.dtype == DType::kBool) {
          t.SetDouble(e, u < 0.5 ? 1 : 0);
        } else {
          double v = std::floor(spec.lo + (spec.hi - spec.lo) * u);
          t.SetDouble(e, std::min(v, spec.hi - 1));
        }
      }
    }
    inputs.push_back(floating ? Convert(t, float_dtype) : t);
  }
  return inputs;
}

std::vector<std::string> CheckDefinition(const OpDef& def) {
  std::vector<std::string> f;
  if (def.cases.empty()) {
    // A backward op whose inputs must be mutually consistent (saved outputs,
    // statistics) may be checked through its forward op's gradient cases,
    // which run it on the fast kernels and on the reference.
    const std::string prefix = "backward op of ";
    const OpDef* fwd = def.no_grad_reason.rfind(prefix, 0) == 0
                           ? OpRegistry::Global().Find(def.no_grad_reason.substr(prefix.size()))
                           : nullptr;
    if (fwd == nullptr || fwd->cases.empty() || !fwd->grad)
      f.push_back(absl::StrCat(def.name, ": no consistency case"));
  }
  if (!def.grad && def.no_grad_reason.empty())
    f.push_back(absl::StrCat(def.name, ": neither a gradient rule nor a no_grad_reason"));
  if (def.kernels.empty()) f.push_back(absl::StrCat(def.name, ": no kernel for any device"));
  return f;
}

CaseReport CheckCase(const OpDef& def, const ConsistencyCase& c, const Bounds& bounds, uint64_t seed) {
  CaseReport r{def.name, c.name};
  auto fail = [&](std::string msg) { r.failures.push_back(absl::StrCat(def.name, "/", c.name, ": ", msg)); };

  std::vector<Tensor> in64 = MakeInputs(def.name, c, DType::kF64, seed);
  auto ref = RunOp(def.name, in64, c.attrs, Impl::kReference);
  if (!ref.ok()) {
    fail(absl::StrCat("reference failed: ", ref.status().message()));
    return r;
  }

  // Forward: each CPU kernel in each dtype it advertises, against the f64 reference.
  auto cpu = def.kernels.find(DeviceKind::kCPU);
  std::vector<DType> dtypes = {DType::kF32};
  if (auto it = def.kernel_dtypes.find(DeviceKind::kCPU); it != def.kernel_dtypes.end()) dtypes = it->second;
  if (cpu != def.kernels.end()) {
    for (DType dt : dtypes) {
      std::vector<Tensor> in = ConvertAll(in64, dt);
      auto out = RunOp(def.name, in, c.attrs, Impl::kKernel);
      if (!out.ok()) {
        fail(absl::StrCat("cpu kernel (", DTypeName(dt), ") failed: ", out.status().message()));
        continue;
      }
      if (out->size() != ref->size()) {
        fail("kernel and reference disagree on the number of outputs");
        continue;
      }
      for (size_t j = 0; j < out->size(); ++j) {
        const Tensor& o = (*out)[j];
        const Tensor& e = (*ref)[j];
        if (o.shape() != e.shape()) {
          fail(absl::StrCat("output ", j, " shape ", ShapeToString(o.shape()), " != reference ",
                            ShapeToString(e.shape())));
          continue;
        }
        double err = RelativeError(o, e);
        bool floating = IsFloatOutput(o);
        // Floating outputs are held to the bound of the dtype the kernel ran in.
        double bound = floating ? bounds.For(dt) : 0;
        r.forward_error = std::max(r.forward_error, std::isnan(err) ? INFINITY : err);
        if (!(err <= bound))
          fail(absl::StrCat("output ", j, " (", DTypeName(dt), ") relative error ", err, " > ", bound));
      }
    }
  }

  if (!def.grad) return r;

  // Gradients: L = sum_j <W_j, out_j> over the chosen floating outputs.
  std::vector<int> gouts = c.grad_outputs;
  if (gouts.empty())
    for (size_t j = 0; j < ref->size(); ++j)
      if (IsFloatOutput((*ref)[j])) gouts.push_back(static_cast<int>(j));
  std::vector<Tensor> weights(ref->size());
  for (int j : gouts) {
    Philox rng(HashName(def.name + "/w/" + c.name), j);
    Tensor w = Tensor::MustEmpty((*ref)[j].shape(), DType::kF64);
    for (int64_t e = 0; e < w.numel(); ++e) w.SetDouble(e, 2 * rng.Uniform(e) - 1);
    weights[j] = w;
  }
  auto loss = [&](const std::vector<Tensor>& in) -> double {
    auto out = RunOp(def.name, in, c.attrs, Impl::kReference);
    if (!out.ok()) return NAN;
    double s = 0;
    for (int j : gouts) s += Dot((*out)[j], weights[j]);
    return s;
  };
  auto grads = EagerGradients(def.name, in64, weights, c.attrs, Impl::kReference);
  if (!grads.ok()) {
    fail(absl::StrCat("gradient rule failed: ", grads.status().message()));
    return r;
  }
  r.grad_fd_error = 0;
  for (size_t i = 0; i < in64.size(); ++i) {
    const InputSpec& spec = c.inputs[i];
    if (!spec.differentiable || !IsFloating(spec.meta.dtype)) continue;
    const Tensor& g = (*grads)[i];
    if (!g.defined()) {
      fail(absl::StrCat("no gradient for differentiable input ", i));
      continue;
    }
    if (g.shape() != in64[i].shape()) {
      fail(absl::StrCat("gradient of input ", i, " has shape ", ShapeToString(g.shape()), ", input ",
                        ShapeToString(in64[i].shape())));
      continue;
    }
    int64_t n = in64[i].numel();
    int64_t probes = std::min<int64_t>(n, bounds.max_probes);
    double num = 0, den = 0;
    Philox pick(HashName(def.name + "/p/" + c.name), i);
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
    r.grad_fd_error = std::max(r.grad_fd_error, std::isnan(err) ? INFINITY : err);
    if (!(err <= bounds.grad_fd))
      fail(absl::StrCat("gradient of input ", i, " vs finite differences: relative error ", err, " > ",
                        bounds.grad_fd));
  }

  // The same rule on the fast kernels (f32) against the f64 reference gradients.
  if (cpu != def.kernels.end()) {
    std::vector<Tensor> in32 = ConvertAll(in64, DType::kF32);
    std::vector<Tensor> w32;
    for (const Tensor& w : weights) w32.push_back(w.defined() ? w.To(DType::kF32) : Tensor());
    auto kgrads = EagerGradients(def.name, in32, w32, c.attrs, Impl::kKernel);
    if (!kgrads.ok()) {
      fail(absl::StrCat("gradient rule on kernels failed: ", kgrads.status().message()));
      return r;
    }
    r.grad_kernel_error = 0;
    for (size_t i = 0; i < in64.size(); ++i) {
      if (!c.inputs[i].differentiable || !IsFloating(c.inputs[i].meta.dtype)) continue;
      if (!(*kgrads)[i].defined() || !(*grads)[i].defined()) continue;
      double err = RelativeError((*kgrads)[i], (*grads)[i]);
      r.grad_kernel_error = std::max(r.grad_kernel_error, std::isnan(err) ? INFINITY : err);
      // Gradients chain several f32 kernels: allow a few f32 roundings more.
      if (!(err <= 5 * bounds.f32))
        fail(absl::StrCat("kernel gradient of input ", i, " relative error ", err, " > ", 5 * bounds.f32));
    }
  }
  return r;
}

}  // namespace loom::kernels::testing
