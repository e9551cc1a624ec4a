// grad_norm, adamw (registry ops) and the multi-tensor AdamW entry point
// (kernels/cpu/nn/adamw.h, which documents the update).
//
//   grad_norm(g_0, ..., g_k) -> norm[] = sqrt(sum_i sum g_i^2); f64 when every
//       input is f64, else f32. no_grad_reason "optimizer".
//   adamw(param, grad, m, v, grad_norm[], lr[], step[]) attrs beta1 (0.9),
//       beta2 (0.999), eps (1e-8), weight_decay (0.01), max_norm (0 = no clip)
//       -> (param', m', v'). step is a scalar of any numeric dtype, >= 1.
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/cpu/nn/adamw.h"
#include "kernels/cpu/nn/common.h"

namespace loom {
namespace kernels::cpu::nn {
namespace {

constexpr int64_t kChunk = 1 << 15;  // elements per reduction / update chunk

// Per-step constants of the update, in f32 for the fast loop.
struct StepConsts {
  float clip, b1, b2, omb1, omb2, decay, step_size, inv_sqrt_bc2, eps;
};

StepConsts MakeConsts(const AdamWOptions& o, double grad_norm, int64_t step) {
  double bc1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  double bc2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  return {static_cast<float>(ClipCoefficient(grad_norm, o.max_norm)),
          static_cast<float>(o.beta1),
          static_cast<float>(o.beta2),
          static_cast<float>(1 - o.beta1),
          static_cast<float>(1 - o.beta2),
          static_cast<float>(1 - o.lr * o.weight_decay),
          static_cast<float>(o.lr / bc1),
          static_cast<float>(1 / std::sqrt(bc2)),
          static_cast<float>(o.eps)};
}

// The fused element loop: reads p, g, m, v; writes po, mo, vo (may alias inputs).
inline void UpdateRange(const StepConsts& k, const float* p, const float* g, const float* m, const float* v,
                        float* po, float* mo, float* vo, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * k.clip;
    const float mi = k.b1 * m[i] + k.omb1 * gi;
    const float vi = k.b2 * v[i] + k.omb2 * gi * gi;
    const float denom = std::sqrt(vi) * k.inv_sqrt_bc2 + k.eps;
    po[i] = p[i] * k.decay - k.step_size * mi / denom;
    mo[i] = mi;
    vo[i] = vi;
  }
}

// Sum of squares over all tensors, chunked so the result is thread-count independent.
double SumSquares(absl::Span<const Tensor> ts) {
  struct Piece {
    int t;
    int64_t lo, hi;
  };
  std::vector<Piece> pieces;
  std::vector<Tensor> contig;
  for (size_t t = 0; t < ts.size(); ++t) {
    contig.push_back(ts[t].dtype() == DType::kF32 || ts[t].dtype() == DType::kF64 ? ts[t].Contiguous()
                                                                                   : ts[t].To(DType::kF32));
    for (int64_t lo = 0; lo < ts[t].numel(); lo += kChunk)
      pieces.push_back({static_cast<int>(t), lo, std::min(ts[t].numel(), lo + kChunk)});
  }
  std::vector<double> part(pieces.size(), 0.0);
  ParallelFor(static_cast<int64_t>(pieces.size()), 1, [&](int64_t a, int64_t b) {
    for (int64_t q = a; q < b; ++q) {
      const Piece& pc = pieces[q];
      const Tensor& t = contig[pc.t];
      if (t.dtype() == DType::kF64) {
        const double* x = t.data<double>() + pc.lo;
        double s = 0;
        for (int64_t i = 0; i < pc.hi - pc.lo; ++i) s += x[i] * x[i];
        part[q] = s;
      } else {
        const float* x = t.data<float>() + pc.lo;
        part[q] = internal::BlockSum(pc.hi - pc.lo, [=](int64_t i) { return x[i] * x[i]; });
      }
    }
  });
  double total = 0;
  for (double s : part) total += s;
  return total;
}

}  // namespace

double ClipCoefficient(double grad_norm, double max_norm) {
  if (!(max_norm > 0)) return 1.0;
  return std::min(1.0, max_norm / (grad_norm + 1e-6));
}

absl::Status ValidateAdamW(const AdamWOptions& o, int64_t step) {
  auto bad = [](const char* name, double v, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected ", want, ", got ", v));
  };
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("beta1", o.beta1, "a value in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("beta2", o.beta2, "a value in [0, 1)");
  if (!(o.eps >= 0)) return bad("eps", o.eps, ">= 0");
  if (!(o.weight_decay >= 0)) return bad("weight_decay", o.weight_decay, ">= 0");
  if (!(o.max_norm >= 0)) return bad("max_norm", o.max_norm, ">= 0");
  if (!(o.lr >= 0)) return bad("lr", o.lr, ">= 0");
  if (step < 1) return absl::InvalidArgumentError(absl::StrCat("step: expected >= 1 (1-based), got ", step));
  return absl::OkStatus();
}

absl::StatusOr<double> GlobalGradNorm(absl::Span<const Tensor> grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || !IsFloating(grads[i].dtype()) || !grads[i].device().is_cpu())
      return absl::InvalidArgumentError(absl::StrCat("grads[", i, "]: expected a floating cpu tensor"));
  }
  return std::sqrt(SumSquares(grads));
}

absl::StatusOr<double> AdamWStepMulti(absl::Span<const Tensor> params, absl::Span<const Tensor> grads,
                                      absl::Span<const Tensor> m, absl::Span<const Tensor> v, int64_t step,
                                      const AdamWOptions& opt) {
  LOOM_RETURN_IF_ERROR(ValidateAdamW(opt, step));
  if (grads.size() != params.size() || m.size() != params.size() || v.size() != params.size())
    return absl::InvalidArgumentError(absl::StrCat("params: ", params.size(), " tensors but grads has ",
                                                   grads.size(), ", m ", m.size(), ", v ", v.size()));
  auto check = [&](const Tensor& t, const char* name, size_t i) -> absl::Status {
    if (!t.defined() || t.dtype() != DType::kF32 || !t.device().is_cpu() || !t.is_contiguous())
      return absl::InvalidArgumentError(absl::StrCat(name, "[", i, "]: expected a contiguous f32 cpu tensor, got ",
                                                     t.defined() ? t.DebugString() : "undefined"));
    if (t.shape() != params[i].shape())
      return absl::InvalidArgumentError(absl::StrCat(name, "[", i, "]: shape ", ShapeToString(t.shape()),
                                                     " does not match params[", i, "] ",
                                                     ShapeToString(params[i].shape())));
    return absl::OkStatus();
  };
  for (size_t i = 0; i < params.size(); ++i) {
    LOOM_RETURN_IF_ERROR(check(params[i], "params", i));
    LOOM_RETURN_IF_ERROR(check(grads[i], "grads", i));
    LOOM_RETURN_IF_ERROR(check(m[i], "m", i));
    LOOM_RETURN_IF_ERROR(check(v[i], "v", i));
  }
  const double norm = std::sqrt(SumSquares(grads));
  const StepConsts k = MakeConsts(opt, norm, step);
  // One pass over a flat list of (tensor, range) pieces of every parameter.
  struct Piece {
    size_t t;
    int64_t lo, hi;
  };
  std::vector<Piece> pieces;
  for (size_t t = 0; t < params.size(); ++t)
    for (int64_t lo = 0; lo < params[t].numel(); lo += kChunk)
      pieces.push_back({t, lo, std::min(params[t].numel(), lo + kChunk)});
  ParallelFor(static_cast<int64_t>(pieces.size()), 1, [&](int64_t a, int64_t b) {
    for (int64_t q = a; q < b; ++q) {
      const Piece& pc = pieces[q];
      float* p = params[pc.t].data<float>() + pc.lo;
      float* mm = m[pc.t].data<float>() + pc.lo;
      float* vv = v[pc.t].data<float>() + pc.lo;
      const float* g = grads[pc.t].data<float>() + pc.lo;
      UpdateRange(k, p, g, mm, vv, p, mm, vv, pc.hi - pc.lo);
    }
  });
  return norm;
}

}  // namespace kernels::cpu::nn

namespace kernels::cpu::nn::internal {
namespace {

using nn::AdamWOptions;
using nn::kChunk;
using nn::MakeConsts;
using nn::StepConsts;
using nn::UpdateRange;

// ---- grad_norm ----
absl::StatusOr<std::vector<TensorMeta>> InferGradNorm(absl::Span<const TensorMeta> in, const Attrs&) {
  bool all64 = !in.empty();
  for (size_t i = 0; i < in.size(); ++i) {
    LOOM_RETURN_IF_ERROR(ExpectFloat(in[i], absl::StrCat("g[", i, "]")));
    all64 = all64 && in[i].dtype == DType::kF64;
  }
  return std::vector<TensorMeta>{{all64 ? DType::kF64 : DType::kF32, Shape{}}};
}

absl::Status GradNormRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  double s = 0;
  for (const Tensor& t : in)
    for (int64_t i = 0; i < t.numel(); ++i) s += t.GetDouble(i) * t.GetDouble(i);
  out[0].SetDouble(0, std::sqrt(s));
  return absl::OkStatus();
}

absl::Status GradNormKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  LOOM_ASSIGN_OR_RETURN(double n, nn::GlobalGradNorm(in));
  out[0].SetDouble(0, n);
  return absl::OkStatus();
}

// ---- adamw ----
absl::StatusOr<AdamWOptions> OptionsOf(const Attrs& a) {
  for (const char* name : {"beta1", "beta2", "eps", "weight_decay", "max_norm"})
    LOOM_RETURN_IF_ERROR(CheckAttr(a, name, AttrKind::kFloat));
  AdamWOptions o;
  o.beta1 = a.GetFloat("beta1", 0.9);
  o.beta2 = a.GetFloat("beta2", 0.999);
  o.eps = a.GetFloat("eps", 1e-8);
  o.weight_decay = a.GetFloat("weight_decay", 1e-2);
  o.max_norm = a.GetFloat("max_norm", 0.0);
  LOOM_RETURN_IF_ERROR(nn::ValidateAdamW(o, 1));
  return o;
}

absl::StatusOr<std::vector<TensorMeta>> InferAdamW(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 7));
  LOOM_RETURN_IF_ERROR(OptionsOf(a).status());
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "param"));
  const char* names[] = {"param", "grad", "m", "v"};
  for (int i = 1; i < 4; ++i) {
    LOOM_RETURN_IF_ERROR(ExpectSameDType(in[i], names[i], in[0], "param"));
    LOOM_RETURN_IF_ERROR(ExpectSameShape(in[i], names[i], in[0], "param"));
  }
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[4], "grad_norm"));
  LOOM_RETURN_IF_ERROR(ExpectScalar(in[4], "grad_norm"));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[5], "lr"));
  LOOM_RETURN_IF_ERROR(ExpectScalar(in[5], "lr"));
  if (in[6].dtype == DType::kBool)
    return absl::InvalidArgumentError("step: expected a numeric dtype, got bool");
  LOOM_RETURN_IF_ERROR(ExpectScalar(in[6], "step"));
  return std::vector<TensorMeta>{in[0], in[0], in[0]};
}

// Reads lr, grad_norm and step from their scalar inputs.
absl::StatusOr<AdamWOptions> RuntimeOptions(absl::Span<const Tensor> in, const Attrs& a, double* grad_norm,
                                            int64_t* step) {
  LOOM_ASSIGN_OR_RETURN(AdamWOptions o, OptionsOf(a));
  o.lr = in[5].GetDouble(0);
  *grad_norm = in[4].GetDouble(0);
  double s = in[6].GetDouble(0);
  if (!(s >= 1) || s != std::floor(s))
    return absl::InvalidArgumentError(absl::StrCat("step: expected an integer >= 1 (1-based), got ", s));
  *step = static_cast<int64_t>(s);
  LOOM_RETURN_IF_ERROR(nn::ValidateAdamW(o, *step));
  if (!(*grad_norm >= 0))
    return absl::InvalidArgumentError(absl::StrCat("grad_norm: expected >= 0, got ", *grad_norm));
  return o;
}

absl::Status AdamWRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  double gn;
  int64_t step;
  LOOM_ASSIGN_OR_RETURN(AdamWOptions o, RuntimeOptions(in, a, &gn, &step));
  Tensor p = AsF64(in[0]), g = AsF64(in[1]), m = AsF64(in[2]), v = AsF64(in[3]);
  Tensor po = NewF64(p.shape()), mo = NewF64(p.shape()), vo = NewF64(p.shape());
  double clip = nn::ClipCoefficient(gn, o.max_norm);
  double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
  for (int64_t i = 0; i < p.numel(); ++i) {
    double gi = g.data<double>()[i] * clip;
    double mi = o.beta1 * m.data<double>()[i] + (1 - o.beta1) * gi;
    double vi = o.beta2 * v.data<double>()[i] + (1 - o.beta2) * gi * gi;
    double pi = p.data<double>()[i] * (1 - o.lr * o.weight_decay);
    pi -= o.lr / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + o.eps);
    po.data<double>()[i] = pi;
    mo.data<double>()[i] = mi;
    vo.data<double>()[i] = vi;
  }
  LOOM_RETURN_IF_ERROR(Store(out[0], po));
  LOOM_RETURN_IF_ERROR(Store(out[1], mo));
  return Store(out[2], vo);
}

absl::Status AdamWKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  double gn;
  int64_t step;
  LOOM_ASSIGN_OR_RETURN(AdamWOptions o, RuntimeOptions(in, a, &gn, &step));
  const StepConsts k = MakeConsts(o, gn, step);
  const float *p = in[0].data<float>(), *g = in[1].data<float>(), *m = in[2].data<float>(), *v = in[3].data<float>();
  float *po = out[0].data<float>(), *mo = out[1].data<float>(), *vo = out[2].data<float>();
  ParallelFor(in[0].numel(), kChunk / 4, [&](int64_t lo, int64_t hi) {
    UpdateRange(k, p + lo, g + lo, m + lo, v + lo, po + lo, mo + lo, vo + lo, hi - lo);
  });
  return absl::OkStatus();
}

kernels::InputSpec F(Shape s, double lo = -1, double hi = 1) {
  kernels::InputSpec spec;
  spec.meta = {DType::kF32, std::move(s)};
  spec.lo = lo;
  spec.hi = hi;
  spec.differentiable = false;
  return spec;
}

kernels::InputSpec Step(DType dt, int64_t value) {
  kernels::InputSpec spec;
  spec.meta.dtype = dt;  // shape stays [] (a scalar)
  spec.differentiable = false;
  spec.fill = [value](Tensor& t, const Philox&) { t.SetDouble(0, static_cast<double>(value)); };
  return spec;
}

kernels::OpDef MakeGradNorm() {
  kernels::OpDef d;
  d.name = "grad_norm";
  d.doc = "grad_norm(g_0, ..., g_k) -> sqrt(sum_i sum g_i^2) (scalar)";
  d.num_inputs = -1;
  d.infer = InferGradNorm;
  d.reference = GradNormRef;
  d.kernels[DeviceKind::kCPU] = GradNormKernel;
  d.no_grad_reason = "optimizer";
  d.cases.push_back({"three", {F({7, 37}), F({5}), F({3, 5, 7})}, Attrs{}});
  d.cases.push_back({"scalar", {F({})}, Attrs{}});
  return d;
}

kernels::OpDef MakeAdamW() {
  kernels::OpDef d;
  d.name = "adamw";
  d.doc =
      "adamw(param, grad, m, v, grad_norm[], lr[], step[]) attrs beta1, beta2, eps, weight_decay, max_norm "
      "-> (param', m', v')";
  d.num_inputs = 7;
  d.num_outputs = 3;
  d.infer = InferAdamW;
  d.reference = AdamWRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(AdamWKernel, AdamWRef);
  d.no_grad_reason = "optimizer";
  d.cases.push_back({"7x37_clip_step3",
                     {F({7, 37}), F({7, 37}), F({7, 37}, -0.1, 0.1), F({7, 37}, 0, 0.01), F({}, 2, 4),
                      F({}, 1e-3, 1e-2), Step(DType::kI64, 3)},
                     Attrs{{"max_norm", 1.0}, {"weight_decay", 0.1}}});
  d.cases.push_back({"3x5x7_noclip_step1_f32step",
                     {F({3, 5, 7}), F({3, 5, 7}), F({3, 5, 7}, 0, 0), F({3, 5, 7}, 0, 0), F({}, 0.1, 0.5),
                      F({}, 1e-2, 2e-2), Step(DType::kF32, 1)},
                     Attrs{{"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-6}}});
  return d;
}

}  // namespace

LOOM_REGISTER_OP(MakeGradNorm());
LOOM_REGISTER_OP(MakeAdamW());

}  // namespace kernels::cpu::nn::internal
}  // namespace loom
