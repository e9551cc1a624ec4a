#include "kernels/cuda/checks.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/tensor.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernel_source_hash.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reference.h"

namespace loom::cuda {
namespace {

using Vec = std::vector<double>;
using Errors = std::vector<std::pair<std::string, double>>;

// Random inputs rounded to `dtype` (returned as the host tensor and its doubles).
struct HostInput {
  Tensor host;
  Vec values;
};

class Checker {
 public:
  Checker(DeviceRuntime* rt, uint64_t seed) : rt_(rt), seed_(seed) {}

  HostInput Normal(std::vector<int64_t> shape, DType dtype, double scale, double shift = 0.0) {
    Philox rng(seed_, ++stream_);
    Vec v(NumElements(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = shift + scale * rng.Normal(i);
    Tensor t = Tensor::FromVector(shape, v, dtype);
    return {t, t.ToVector()};
  }
  HostInput Uniform(std::vector<int64_t> shape, DType dtype, double lo, double hi) {
    Philox rng(seed_, ++stream_);
    Vec v(NumElements(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * rng.Uniform(i);
    Tensor t = Tensor::FromVector(shape, v, dtype);
    return {t, t.ToVector()};
  }
  absl::StatusOr<Tensor> Up(const Tensor& host) { return ToDevice(host, rt_->device()); }
  // A device tensor filled with 0xFF bytes (NaN for f32/bf16).
  absl::StatusOr<Tensor> Poisoned(std::vector<int64_t> shape, DType dtype) {
    LOOM_ASSIGN_OR_RETURN(Tensor t, rt_->Empty(shape, dtype));
    LOOM_RETURN_IF_ERROR(FillBytes(t.raw_data(), t.nbytes(), 0xFF, rt_->compute_stream()));
    return t;
  }
  absl::StatusOr<Vec> Down(const Tensor& dev) {
    LOOM_RETURN_IF_ERROR(rt_->SynchronizeCompute());
    LOOM_ASSIGN_OR_RETURN(Tensor h, ToHost(dev));
    return h.ToVector();
  }
  StreamHandle stream() const { return rt_->compute_stream(); }
  DeviceRuntime* rt() const { return rt_; }

 private:
  DeviceRuntime* rt_;
  uint64_t seed_;
  uint64_t stream_ = 0;
};

double RelErr(const Vec& out, const Vec& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

std::string ShapeStr(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (auto& d : dims) absl::StrAppend(&s, s.empty() ? "" : " ", d.first, "=", d.second);
  return s;
}

double Tol(DType dt) { return dt == DType::kF32 ? 1e-4 : 1e-2; }

// ---- GEMM ------------------------------------------------------------------------
struct GemmCase {
  DType dtype;
  int64_t m, n, k;
  bool ta, tb;
  Epilogue epi;
};

absl::StatusOr<Errors> CheckGemm(Checker& c, const GemmCase& g) {
  const DType dt = g.dtype;
  HostInput a = c.Normal(g.ta ? std::vector<int64_t>{g.k, g.m} : std::vector<int64_t>{g.m, g.k}, dt, 1.0);
  HostInput b = c.Normal(g.tb ? std::vector<int64_t>{g.n, g.k} : std::vector<int64_t>{g.k, g.n}, dt, 1.0);
  HostInput bias = c.Normal({g.n}, dt, 1.0);
  HostInput aux_in = c.Normal({g.m, g.n}, dt, 1.5);
  LOOM_ASSIGN_OR_RETURN(Tensor da, c.Up(a.host));
  LOOM_ASSIGN_OR_RETURN(Tensor db, c.Up(b.host));
  LOOM_ASSIGN_OR_RETURN(Tensor dbias, c.Up(bias.host));
  LOOM_ASSIGN_OR_RETURN(Tensor dd, c.Poisoned({g.m, g.n}, dt));
  const bool aux_out = g.epi == Epilogue::kGeluAux || g.epi == Epilogue::kBiasGeluAux;
  const bool aux_inp = g.epi == Epilogue::kDGelu || g.epi == Epilogue::kDGeluBgrad;
  Tensor daux, dbgrad;
  if (aux_out) { LOOM_ASSIGN_OR_RETURN(daux, c.Poisoned({g.m, g.n}, dt)); }
  if (aux_inp) { LOOM_ASSIGN_OR_RETURN(daux, c.Up(aux_in.host)); }
  if (g.epi == Epilogue::kDGeluBgrad) { LOOM_ASSIGN_OR_RETURN(dbgrad, c.Poisoned({g.n}, dt)); }
  GemmArgs args;
  args.dtype = dt;
  args.m = g.m, args.n = g.n, args.k = g.k;
  args.trans_a = g.ta, args.trans_b = g.tb;
  args.a = da.raw_data(), args.b = db.raw_data(), args.d = dd.raw_data();
  args.epilogue = g.epi;
  args.bias = dbias.raw_data();
  args.aux = daux.defined() ? daux.raw_data() : nullptr;
  args.bias_grad = dbgrad.defined() ? dbgrad.raw_data() : nullptr;
  args.stream = c.stream();
  LOOM_RETURN_IF_ERROR(Gemm(args));
  // Reference.
  Vec acc = ref::Gemm(g.m, g.n, g.k, g.ta, g.tb, a.values, b.values);
  const bool with_bias = g.epi == Epilogue::kBias || g.epi == Epilogue::kBiasGelu || g.epi == Epilogue::kBiasGeluAux;
  if (with_bias)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) acc[i * g.n + j] += bias.values[j];
  Vec d = acc, aux_ref, bgrad_ref;
  switch (g.epi) {
    case Epilogue::kGelu: case Epilogue::kBiasGelu: case Epilogue::kGeluAux: case Epilogue::kBiasGeluAux:
      for (double& v : d) v = ref::GeluTanh(v);
      aux_ref = acc;
      break;
    case Epilogue::kDGelu: case Epilogue::kDGeluBgrad:
      for (size_t i = 0; i < d.size(); ++i) d[i] = acc[i] * ref::DGeluTanh(aux_in.values[i]);
      bgrad_ref.assign(g.n, 0.0);
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) bgrad_ref[j] += d[i * g.n + j];
      break;
    default: break;
  }
  Errors errs;
  LOOM_ASSIGN_OR_RETURN(Vec out, c.Down(dd));
  errs.push_back({"d", RelErr(out, d)});
  if (aux_out) {
    LOOM_ASSIGN_OR_RETURN(Vec aux, c.Down(daux));
    errs.push_back({"aux", RelErr(aux, aux_ref)});
  }
  if (g.epi == Epilogue::kDGeluBgrad) {
    LOOM_ASSIGN_OR_RETURN(Vec bg, c.Down(dbgrad));
    errs.push_back({"bias_grad", RelErr(bg, bgrad_ref)});
  }
  return errs;
}

// ---- Elementwise -------------------------------------------------------------------
absl::StatusOr<Errors> CheckElementwise(Checker& c, const std::string& op, DType dt, int64_t n) {
  HostInput a = c.Normal({n}, dt, 2.0), b = c.Normal({n}, dt, 1.0);
  LOOM_ASSIGN_OR_RETURN(Tensor da, c.Up(a.host));
  LOOM_ASSIGN_OR_RETURN(Tensor db, c.Up(b.host));
  LOOM_ASSIGN_OR_RETURN(Tensor out, c.Poisoned({n}, dt));
  Vec r(n);
  const Vec& x = a.values;
  const Vec& y = b.values;
  if (op == "add") {
    LOOM_RETURN_IF_ERROR(Add(dt, n, da.raw_data(), db.raw_data(), out.raw_data(), c.stream()));
    for (int64_t i = 0; i < n; ++i) r[i] = x[i] + y[i];
  } else if (op == "mul") {
    LOOM_RETURN_IF_ERROR(Mul(dt, n, da.raw_data(), db.raw_data(), out.raw_data(), c.stream()));
    for (int64_t i = 0; i < n; ++i) r[i] = x[i] * y[i];
  } else if (op == "gelu_tanh" || op == "gelu_erf") {
    const bool t = op == "gelu_tanh";
    LOOM_RETURN_IF_ERROR(GeluForward(dt, n, da.raw_data(), out.raw_data(), t, c.stream()));
    for (int64_t i = 0; i < n; ++i) r[i] = t ? ref::GeluTanh(x[i]) : ref::GeluErf(x[i]);
  } else {
    const bool t = op == "gelu_tanh_backward";
    LOOM_RETURN_IF_ERROR(GeluBackward(dt, n, da.raw_data(), db.raw_data(), out.raw_data(), t, c.stream()));
    for (int64_t i = 0; i < n; ++i) r[i] = y[i] * (t ? ref::DGeluTanh(x[i]) : ref::DGeluErf(x[i]));
  }
  LOOM_ASSIGN_OR_RETURN(Vec o, c.Down(out));
  return Errors{{"out", RelErr(o, r)}};
}

// ---- LayerNorm ---------------------------------------------------------------------
absl::StatusOr<Errors> CheckLayerNormFwd(Checker& c, DType dt, int64_t rows, int64_t cols, bool residual) {
  HostInput x = c.Normal({rows, cols}, dt, 1.0, 0.5), res = c.Normal({rows, cols}, dt, 1.0);
  HostInput w = c.Normal({cols}, DType::kF32, 0.2, 1.0), b = c.Normal({cols}, DType::kF32, 0.2);
  LOOM_ASSIGN_OR_RETURN(Tensor dx, c.Up(x.host));
  LOOM_ASSIGN_OR_RETURN(Tensor dres, c.Up(res.host));
  LOOM_ASSIGN_OR_RETURN(Tensor dw, c.Up(w.host));
  LOOM_ASSIGN_OR_RETURN(Tensor dbias, c.Up(b.host));
  LOOM_ASSIGN_OR_RETURN(Tensor y, c.Poisoned({rows, cols}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor xs, c.Poisoned({rows, cols}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor mean, c.Poisoned({rows}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor rstd, c.Poisoned({rows}, DType::kF32));
  LayerNormFwdArgs a;
  a.dtype = dt, a.rows = rows, a.cols = cols;
  a.x = dx.raw_data();
  a.residual = residual ? dres.raw_data() : nullptr;
  a.x_sum = residual ? xs.raw_data() : nullptr;
  a.weight = static_cast<const float*>(dw.raw_data());
  a.bias = static_cast<const float*>(dbias.raw_data());
  a.y = y.raw_data();
  a.mean = static_cast<float*>(mean.raw_data());
  a.rstd = static_cast<float*>(rstd.raw_data());
  a.eps = 1e-5f;
  a.stream = c.stream();
  LOOM_RETURN_IF_ERROR(LayerNormForward(a));
  Vec ry, rxs, rmean, rrstd;
  ref::LayerNormFwd(rows, cols, x.values, residual ? res.values : Vec{}, w.values, b.values, 1e-5, &ry, &rxs,
                    &rmean, &rrstd);
  Errors e;
  LOOM_ASSIGN_OR_RETURN(Vec oy, c.Down(y));
  e.push_back({"y", RelErr(oy, ry)});
  if (residual) {
    LOOM_ASSIGN_OR_RETURN(Vec oxs, c.Down(xs));
    e.push_back({"x_sum", RelErr(oxs, rxs)});
  }
  LOOM_ASSIGN_OR_RETURN(Vec om, c.Down(mean));
  e.push_back({"mean", RelErr(om, rmean)});
  LOOM_ASSIGN_OR_RETURN(Vec orr, c.Down(rstd));
  e.push_back({"rstd", RelErr(orr, rrstd)});
  return e;
}

absl::StatusOr<Errors> CheckLayerNormBwd(Checker& c, DType dt, int64_t rows, int64_t cols, bool colsum) {
  HostInput x = c.Normal({rows, cols}, dt, 1.0, 0.5), dy = c.Normal({rows, cols}, dt, 1.0);
  HostInput dres = c.Normal({rows, cols}, dt, 0.5);
  HostInput w = c.Normal({cols}, DType::kF32, 0.2, 1.0);
  // Statistics of the (rounded) input, as the forward would have saved them.
  Vec ym, xs, mean, rstd;
  ref::LayerNormFwd(rows, cols, x.values, {}, w.values, {}, 1e-5, &ym, &xs, &mean, &rstd);
  Tensor hmean = Tensor::FromVector({rows}, mean, DType::kF32), hrstd = Tensor::FromVector({rows}, rstd, DType::kF32);
  LOOM_ASSIGN_OR_RETURN(Tensor d_x, c.Up(x.host));
  LOOM_ASSIGN_OR_RETURN(Tensor d_dy, c.Up(dy.host));
  LOOM_ASSIGN_OR_RETURN(Tensor d_dres, c.Up(dres.host));
  LOOM_ASSIGN_OR_RETURN(Tensor d_w, c.Up(w.host));
  LOOM_ASSIGN_OR_RETURN(Tensor d_mean, c.Up(hmean));
  LOOM_ASSIGN_OR_RETURN(Tensor d_rstd, c.Up(hrstd));
  LOOM_ASSIGN_OR_RETURN(Tensor o_dx, c.Poisoned({rows, cols}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor o_dw, c.Poisoned({cols}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor o_db, c.Poisoned({cols}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor o_ds, c.Poisoned({cols}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor ws, c.Poisoned({LayerNormBwdWorkspaceFloats(rows, cols)}, DType::kF32));
  LayerNormBwdArgs a;
  a.dtype = dt, a.rows = rows, a.cols = cols;
  a.dy = d_dy.raw_data(), a.x = d_x.raw_data();
  a.weight = static_cast<const float*>(d_w.raw_data());
  a.mean = static_cast<const float*>(d_mean.raw_data());
  a.rstd = static_cast<const float*>(d_rstd.raw_data());
  a.dresidual = d_dres.raw_data();
  a.dx = o_dx.raw_data();
  a.dweight = static_cast<float*>(o_dw.raw_data());
  a.dbias = static_cast<float*>(o_db.raw_data());
  if (colsum) a.dx_colsum = static_cast<float*>(o_ds.raw_data());
  a.workspace = static_cast<float*>(ws.raw_data());
  a.stream = c.stream();
  LOOM_RETURN_IF_ERROR(LayerNormBackward(a));
  Vec rdx, rdw, rdb;
  ref::LayerNormBwd(rows, cols, dy.values, x.values, w.values, 1e-5, dres.values, &rdx, &rdw, &rdb);
  Errors e;
  LOOM_ASSIGN_OR_RETURN(Vec odx, c.Down(o_dx));
  e.push_back({"dx", RelErr(odx, rdx)});
  LOOM_ASSIGN_OR_RETURN(Vec odw, c.Down(o_dw));
  e.push_back({"dweight", RelErr(odw, rdw)});
  LOOM_ASSIGN_OR_RETURN(Vec odb, c.Down(o_db));
  e.push_back({"dbias", RelErr(odb, rdb)});
  if (colsum) {
    Vec rds(cols, 0.0);
    for (int64_t i = 0; i < rows * cols; ++i) rds[i % cols] += rdx[i];
    LOOM_ASSIGN_OR_RETURN(Vec ods, c.Down(o_ds));
    e.push_back({"dx_colsum", RelErr(ods, rds)});
  }
  return e;
}

// ---- Cross-entropy ---------------------------------------------------------------------
absl::StatusOr<Errors> CheckCrossEntropy(Checker& c, DType dt, int64_t rows, int64_t vocab) {
  HostInput logits = c.Normal({rows, vocab}, dt, 2.0);
  HostInput u = c.Uniform({rows}, DType::kF64, 0.0, 1.0);
  std::vector<double> tv(rows);
  std::vector<int32_t> t(rows);
  int valid = 0;
  for (int64_t r = 0; r < rows; ++r) {
    t[r] = (r % 17 == 5) ? -1 : static_cast<int32_t>(u.values[r] * vocab) % vocab;
    tv[r] = t[r];
    valid += t[r] >= 0;
  }
  const double scale = 1.0 / valid;
  LOOM_ASSIGN_OR_RETURN(Tensor d_logits, c.Up(logits.host));
  LOOM_ASSIGN_OR_RETURN(Tensor d_t, c.Up(Tensor::FromVector({rows}, tv, DType::kI32)));
  LOOM_ASSIGN_OR_RETURN(Tensor o_loss, c.Poisoned({rows}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor o_lse, c.Poisoned({rows}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor o_dl, c.Poisoned({rows, vocab}, dt));
  const int32_t* tp = static_cast<const int32_t*>(d_t.raw_data());
  LOOM_RETURN_IF_ERROR(CrossEntropyForward(dt, rows, vocab, d_logits.raw_data(), tp,
                                           static_cast<float*>(o_loss.raw_data()),
                                           static_cast<float*>(o_lse.raw_data()), c.stream()));
  LOOM_RETURN_IF_ERROR(CrossEntropyBackward(dt, rows, vocab, d_logits.raw_data(), tp,
                                            static_cast<const float*>(o_lse.raw_data()), static_cast<float>(scale),
                                            o_dl.raw_data(), c.stream()));
  Vec rl, rdl;
  ref::CrossEntropy(rows, vocab, logits.values, t, scale, &rl, &rdl);
  Errors e;
  LOOM_ASSIGN_OR_RETURN(Vec ol, c.Down(o_loss));
  e.push_back({"losses", RelErr(ol, rl)});
  LOOM_ASSIGN_OR_RETURN(Vec odl, c.Down(o_dl));
  e.push_back({"dlogits", RelErr(odl, rdl)});
  return e;
}

// ---- AdamW -------------------------------------------------------------------------------
absl::StatusOr<Errors> CheckAdamW(Checker& c, DType grad_dt, const std::vector<int64_t>& sizes) {
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const int64_t step = 10;
  struct Param {
    HostInput p, g, m, v;
    Tensor dp, dg, dm, dv, dpb;
    bool decay;
  };
  std::vector<Param> ps(sizes.size());
  std::vector<AdamWTensor> ts;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Param& q = ps[i];
    const int64_t n = sizes[i];
    q.p = c.Normal({n}, DType::kF32, 1.0);
    q.g = c.Normal({n}, grad_dt, 0.1);
    q.m = c.Normal({n}, DType::kF32, 0.01);
    q.v = c.Uniform({n}, DType::kF32, 1e-5, 1e-3);
    q.decay = i % 2 == 0;
    LOOM_ASSIGN_OR_RETURN(q.dp, c.Up(q.p.host));
    LOOM_ASSIGN_OR_RETURN(q.dg, c.Up(q.g.host));
    LOOM_ASSIGN_OR_RETURN(q.dm, c.Up(q.m.host));
    LOOM_ASSIGN_OR_RETURN(q.dv, c.Up(q.v.host));
    LOOM_ASSIGN_OR_RETURN(q.dpb, c.Poisoned({n}, DType::kBF16));
    ts.push_back({static_cast<float*>(q.dp.raw_data()), q.dg.raw_data(), static_cast<float*>(q.dm.raw_data()),
                  static_cast<float*>(q.dv.raw_data()), n, q.decay, q.dpb.raw_data()});
  }
  LOOM_ASSIGN_OR_RETURN(auto opt, AdamWMultiTensor::Create(ts, grad_dt));
  AdamWHyper h;
  h.lr = lr, h.beta1 = b1, h.beta2 = b2, h.eps = eps, h.weight_decay = wd, h.step = step;
  LOOM_RETURN_IF_ERROR(opt->Step(h, c.stream()));
  Vec dp_out, dp_ref, m_out, m_ref, v_out, v_ref, pb_out, pb_ref;
  for (Param& q : ps) {
    Vec p = q.p.values, m = q.m.values, v = q.v.values;
    ref::AdamW(p, q.g.values, m, v, lr, b1, b2, eps, wd, step, q.decay);
    LOOM_ASSIGN_OR_RETURN(Vec op, c.Down(q.dp));
    LOOM_ASSIGN_OR_RETURN(Vec om, c.Down(q.dm));
    LOOM_ASSIGN_OR_RETURN(Vec ov, c.Down(q.dv));
    LOOM_ASSIGN_OR_RETURN(Vec opb, c.Down(q.dpb));
    for (size_t i = 0; i < p.size(); ++i) {
      dp_out.push_back(op[i] - q.p.values[i]);  // compare the update, not the (much larger) weight
      dp_ref.push_back(p[i] - q.p.values[i]);
    }
    m_out.insert(m_out.end(), om.begin(), om.end());
    m_ref.insert(m_ref.end(), m.begin(), m.end());
    v_out.insert(v_out.end(), ov.begin(), ov.end());
    v_ref.insert(v_ref.end(), v.begin(), v.end());
    pb_out.insert(pb_out.end(), opb.begin(), opb.end());
    for (double x : op) pb_ref.push_back(static_cast<float>(BF16(static_cast<float>(x))));  // exactly the f32 result, rounded
  }
  return Errors{{"param_update", RelErr(dp_out, dp_ref)},
                {"m", RelErr(m_out, m_ref)},
                {"v", RelErr(v_out, v_ref)},
                {"param_bf16", RelErr(pb_out, pb_ref)}};
}

}  // namespace

const char* KernelSourceHash() { return LOOM_CUDA_KERNEL_SOURCE_HASH; }

absl::StatusOr<std::vector<CheckResult>> RunKernelChecks(const CheckOptions& opts) {
  LOOM_RETURN_IF_ERROR(CudaAvailable());
  LOOM_ASSIGN_OR_RETURN(DeviceRuntime * rt, DeviceRuntime::Get(0));
  LOOM_RETURN_IF_ERROR(rt->MakeCurrent());
  Checker c(rt, opts.seed);
  std::vector<CheckResult> rows;
  auto run = [&](std::string name, DType dt, std::string shape, double tol,
                 const std::function<absl::StatusOr<Errors>()>& fn) {
    CheckResult r;
    r.name = std::move(name);
    r.dtype = std::string(DTypeName(dt));
    r.shape = std::move(shape);
    r.tol = tol;
    absl::StatusOr<Errors> e = fn();
    if (!e.ok()) {
      r.rel_err = INFINITY;
      r.detail = std::string(e.status().message());
      r.pass = false;
    } else {
      r.rel_err = 0;
      for (auto& kv : *e) {
        r.rel_err = std::max(r.rel_err, std::isfinite(kv.second) ? kv.second : INFINITY);
        absl::StrAppend(&r.detail, r.detail.empty() ? "" : " ", kv.first, "=", absl::StrFormat("%.2e", kv.second));
      }
      r.pass = std::isfinite(r.rel_err) && r.rel_err <= tol;
    }
    rows.push_back(std::move(r));
  };

  const int64_t scale = opts.full ? 2 : 1;
  // GEMM: every transpose pair in f32 and bf16, odd shapes, each epilogue.
  std::vector<GemmCase> gemms;
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int t = 0; t < 4; ++t) gemms.push_back({dt, 192 * scale, 320, 256, (t & 1) != 0, (t & 2) != 0, Epilogue::kNone});
  gemms.push_back({DType::kBF16, 100, 72, 136, false, false, Epilogue::kNone});
  gemms.push_back({DType::kF32, 1024, 1024, 1024 * scale, false, false, Epilogue::kNone});
  gemms.push_back({DType::kBF16, 1024, 1024, 1024 * scale, false, true, Epilogue::kNone});
  for (DType dt : {DType::kF32, DType::kBF16})
    for (Epilogue e : {Epilogue::kBias, Epilogue::kGelu, Epilogue::kBiasGelu, Epilogue::kGeluAux,
                       Epilogue::kBiasGeluAux, Epilogue::kDGelu, Epilogue::kDGeluBgrad})
      gemms.push_back({dt, 256, 384, 192, false, e == Epilogue::kDGelu || e == Epilogue::kDGeluBgrad, e});
  for (const GemmCase& g : gemms) {
    run(absl::StrCat("gemm ", EpilogueName(g.epi), " tA=", g.ta, " tB=", g.tb), g.dtype,
        ShapeStr({{"m", g.m}, {"n", g.n}, {"k", g.k}}), Tol(g.dtype), [&] { return CheckGemm(c, g); });
  }
  const int64_t n = (int64_t{1} << 20) * scale + 3;
  for (DType dt : {DType::kF32, DType::kBF16})
    for (const char* op : {"add", "mul", "gelu_tanh", "gelu_erf", "gelu_tanh_backward", "gelu_erf_backward"})
      run(op, dt, ShapeStr({{"n", n}}), Tol(dt), [&] { return CheckElementwise(c, op, dt, n); });
  for (DType dt : {DType::kF32, DType::kBF16}) {
    run("layernorm", dt, ShapeStr({{"rows", 512}, {"cols", 768}}), Tol(dt),
        [&] { return CheckLayerNormFwd(c, dt, 512, 768, false); });
    run("layernorm +residual", dt, ShapeStr({{"rows", 300}, {"cols", 1000}}), Tol(dt),
        [&] { return CheckLayerNormFwd(c, dt, 300, 1000, true); });
    run("layernorm_backward +dresidual +colsum", dt, ShapeStr({{"rows", 512}, {"cols", 768}}), Tol(dt),
        [&] { return CheckLayerNormBwd(c, dt, 512, 768, true); });
    run("layernorm_backward +dresidual +colsum", dt, ShapeStr({{"rows", 1000}, {"cols", 4100}}), Tol(dt),
        [&] { return CheckLayerNormBwd(c, dt, 1000, 4100, true); });
    // Warp-per-row kernels: a narrow odd width, and more rows than warps in the grid.
    run("layernorm +residual", dt, ShapeStr({{"rows", 37}, {"cols", 200}}), Tol(dt),
        [&] { return CheckLayerNormFwd(c, dt, 37, 200, true); });
    run("layernorm +residual", dt, ShapeStr({{"rows", 16384}, {"cols", 768}}), Tol(dt),
        [&] { return CheckLayerNormFwd(c, dt, 16384, 768, true); });
    run("layernorm_backward +dresidual +colsum", dt, ShapeStr({{"rows", 37}, {"cols", 200}}), Tol(dt),
        [&] { return CheckLayerNormBwd(c, dt, 37, 200, true); });
    run("layernorm_backward +dresidual", dt, ShapeStr({{"rows", 5000}, {"cols", 384}}), Tol(dt),
        [&] { return CheckLayerNormBwd(c, dt, 5000, 384, false); });
    // The GPT-2 shape: the vectorised bf16 kernel with several rows per warp.
    run("layernorm_backward +dresidual", dt, ShapeStr({{"rows", 16384}, {"cols", 768}}), Tol(dt),
        [&] { return CheckLayerNormBwd(c, dt, 16384, 768, false); });
    run("layernorm_backward +dresidual +colsum", dt, ShapeStr({{"rows", 16384}, {"cols", 768}}), Tol(dt),
        [&] { return CheckLayerNormBwd(c, dt, 16384, 768, true); });
    run("cross_entropy fwd+bwd", dt, ShapeStr({{"rows", 64 * scale}, {"vocab", 50304}}), Tol(dt),
        [&] { return CheckCrossEntropy(c, dt, 64 * scale, 50304); });
    run("cross_entropy fwd+bwd", dt, ShapeStr({{"rows", 33}, {"vocab", 1000}}), Tol(dt),
        [&] { return CheckCrossEntropy(c, dt, 33, 1000); });
  }
  const std::vector<int64_t> sizes = {1, 777, 16384, 16385, 100003, 250000 * scale};
  for (DType dt : {DType::kF32, DType::kBF16})
    run("adamw multi-tensor (6 tensors, 1 launch)", dt, ShapeStr({{"numel", 383550 + 250000 * (scale - 1)}}),
        1e-4, [&] { return CheckAdamW(c, dt, sizes); });
  return rows;
}

std::string FormatCheckTable(const std::vector<CheckResult>& rows) {
  std::string s = absl::StrFormat("%-44s %-5s %-26s %-10s %-8s %-6s %s\n", "check", "dtype", "shape", "rel_err",
                                  "tol", "result", "outputs");
  int passed = 0, failed = 0;
  for (const CheckResult& r : rows) {
    (r.pass ? passed : failed)++;
    absl::StrAppend(&s, absl::StrFormat("%-44s %-5s %-26s %-10.2e %-8.0e %-6s %s\n", r.name, r.dtype, r.shape,
                                        r.rel_err, r.tol, r.pass ? "PASS" : "FAIL", r.detail));
  }
  absl::StrAppend(&s, "kernel source hash ", KernelSourceHash(), "\n");
  absl::StrAppend(&s, passed, " passed, ", failed, " failed\n");
  return s;
}

}  // namespace loom::cuda
