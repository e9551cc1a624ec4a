#include "kernels/cuda/checks.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/tensor.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernel_source_hash.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/reductions.h"
#include "kernels/cuda/reference.h"

namespace loom::kernels::cuda {
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

// The raw kernels' int cudaError_t as a Status.
absl::Status CudaErrorStatus(int e, const char* what) {
  if (e == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", e));
}

// `dev` copied to the host after the compute stream finished.
absl::StatusOr<Tensor> ToHostSync(Checker& c, const Tensor& dev) {
  LOOM_RETURN_IF_ERROR(c.rt()->SynchronizeCompute());
  return ToHost(dev);
}

// ---- GEMM ------------------------------------------------------------------------
struct GemmCase {
  DType dtype;
  int64_t m, n, k;
  bool ta, tb;
  Epilogue epi;
};

// D = A B + D (beta 1, the plan's gemm_accumulate) from a random D.
absl::StatusOr<Errors> CheckGemmAccumulate(Checker& c, const GemmCase& g) {
  const DType dt = g.dtype;
  HostInput a = c.Normal(g.ta ? std::vector<int64_t>{g.k, g.m} : std::vector<int64_t>{g.m, g.k}, dt, 1.0);
  HostInput b = c.Normal(g.tb ? std::vector<int64_t>{g.n, g.k} : std::vector<int64_t>{g.k, g.n}, dt, 1.0);
  HostInput d0 = c.Normal({g.m, g.n}, dt, 8.0);
  LOOM_ASSIGN_OR_RETURN(Tensor da, c.Up(a.host));
  LOOM_ASSIGN_OR_RETURN(Tensor db, c.Up(b.host));
  LOOM_ASSIGN_OR_RETURN(Tensor dd, c.Up(d0.host));
  GemmArgs args;
  args.dtype = dt;
  args.m = g.m, args.n = g.n, args.k = g.k;
  args.trans_a = g.ta, args.trans_b = g.tb;
  args.a = da.raw_data(), args.b = db.raw_data(), args.d = dd.raw_data();
  args.beta = 1.0f;
  args.stream = c.stream();
  LOOM_RETURN_IF_ERROR(Gemm(args));
  Vec want = ref::Gemm(g.m, g.n, g.k, g.ta, g.tb, a.values, b.values);
  for (size_t i = 0; i < want.size(); ++i) want[i] += d0.values[i];
  LOOM_ASSIGN_OR_RETURN(Vec out, c.Down(dd));
  return Errors{{"d", RelErr(out, want)}};
}

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

// ---- LayerNorm backward ------------------------------------------------------------
absl::StatusOr<Errors> CheckLayerNormBwd(Checker& c, DType dt, int64_t rows, int64_t cols) {
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
  return e;
}

using RunFn = std::function<void(std::string, DType, std::string, double,
                                 const std::function<absl::StatusOr<Errors>()>&)>;

#ifdef LOOM_HAVE_CUDA
void FreeDevice(void* p) { cudaFree(p); }

// ---- Column sums and the grad norm (reductions.h) --------------------------------
// Both run twice: the second result must be bit-identical to the first (fixed
// partitions, fixed-order combines); the "rerun" entry is 0 or inf.
double RerunBits(const Tensor& a, const Tensor& b) {
  return std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0 ? 0.0 : INFINITY;
}

// offset: the input starts that many elements into its buffer (1: not 16-byte
// aligned, the one-column-per-thread kernel).
absl::StatusOr<Errors> CheckSumRows(Checker& c, DType dt, int64_t rows, int64_t cols, int64_t offset) {
  HostInput x = c.Normal({rows * cols + offset}, dt, 1.0, 0.25);
  Vec ref(cols, 0.0);
  for (int64_t i = 0; i < rows * cols; ++i) ref[i % cols] += x.values[offset + i];
  LOOM_ASSIGN_OR_RETURN(Tensor dx, c.Up(x.host));
  LOOM_ASSIGN_OR_RETURN(Tensor ws, c.Poisoned({kern::SumRowsWorkspaceFloats(rows, cols)}, DType::kF32));
  const void* xp = static_cast<const char*>(dx.raw_data()) + offset * DTypeSize(dt);
  Tensor out[2];
  for (Tensor& o : out) {
    LOOM_ASSIGN_OR_RETURN(o, c.Poisoned({cols}, DType::kF32));
    LOOM_RETURN_IF_ERROR(CudaErrorStatus(kern::SumRows(dt == DType::kBF16 ? kern::kBF16 : kern::kF32, kern::kF32,
                                                       rows, cols, xp, o.raw_data(),
                                                       static_cast<float*>(ws.raw_data()), c.stream()),
                                         "sum_rows"));
    LOOM_ASSIGN_OR_RETURN(o, ToHostSync(c, o));
  }
  return Errors{{"out", RelErr(out[0].ToVector(), ref)}, {"rerun", RerunBits(out[0], out[1])}};
}

// RMSNorm forward and backward (rmsnorm.h), the backward with and without a
// residual gradient added to dx; references in f64 from the rounded inputs.
// dy_dt bf16 with dt f32: the f32 residual stream's backward, whose bf16 copy
// of dx (copy) must be dx rounded to nearest even.
absl::StatusOr<Errors> CheckRmsNorm(Checker& c, DType dt, DType dy_dt, int64_t rows, int64_t cols, bool residual,
                                    bool copy) {
  const double eps = 1e-6;
  HostInput x = c.Normal({rows, cols}, dt, 1.0, 0.1), dy = c.Normal({rows, cols}, dy_dt, 1.0);
  HostInput w = c.Normal({cols}, DType::kF32, 0.2, 1.0), dres = c.Normal({rows, cols}, dt, 0.5);
  Vec ry(rows * cols), rrs(rows), rdx(rows * cols), rdw(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0, s = 0;
    for (int64_t j = 0; j < cols; ++j) ss += x.values[r * cols + j] * x.values[r * cols + j];
    const double rs = 1.0 / std::sqrt(ss / cols + eps);
    rrs[r] = rs;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = r * cols + j;
      ry[i] = x.values[i] * rs * w.values[j];
      s += dy.values[i] * w.values[j] * x.values[i] * rs;
      rdw[j] += dy.values[i] * x.values[i] * rs;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = r * cols + j;
      rdx[i] = rs * (dy.values[i] * w.values[j] - x.values[i] * rs * s / cols) + (residual ? dres.values[i] : 0.0);
    }
  }
  LOOM_ASSIGN_OR_RETURN(Tensor dx_in, c.Up(x.host));
  LOOM_ASSIGN_OR_RETURN(Tensor ddy, c.Up(dy.host));
  LOOM_ASSIGN_OR_RETURN(Tensor dw_in, c.Up(w.host));
  LOOM_ASSIGN_OR_RETURN(Tensor ddres, c.Up(dres.host));
  LOOM_ASSIGN_OR_RETURN(Tensor y, c.Poisoned({rows, cols}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor rs, c.Poisoned({rows}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor dx, c.Poisoned({rows, cols}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor dx16, c.Poisoned({rows, cols}, DType::kBF16));
  LOOM_ASSIGN_OR_RETURN(Tensor dw, c.Poisoned({cols}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor ws, c.Poisoned({kern::RmsNormBwdWorkspaceFloats(rows, cols)}, DType::kF32));
  auto code = [](DType d) { return d == DType::kBF16 ? kern::kBF16 : kern::kF32; };
  const float* wp = static_cast<const float*>(dw_in.raw_data());
  float* rsp = static_cast<float*>(rs.raw_data());
  LOOM_RETURN_IF_ERROR(CudaErrorStatus(
      kern::RmsNormForward(code(dt), rows, cols, dx_in.raw_data(), wp, eps, y.raw_data(), rsp, c.stream()),
      "rmsnorm"));
  kern::RmsNormBwdArgs a;
  a.dy_dt = code(dy_dt);
  a.x_dt = a.dres_dt = a.dx_dt = code(dt);
  a.rows = rows, a.cols = cols;
  a.dy = ddy.raw_data(), a.x = dx_in.raw_data(), a.w = wp, a.rstd = rsp;
  a.dresidual = residual ? ddres.raw_data() : nullptr;
  a.dx = dx.raw_data(), a.dx_bf16 = copy ? dx16.raw_data() : nullptr;
  a.dw = static_cast<float*>(dw.raw_data()), a.workspace = static_cast<float*>(ws.raw_data());
  a.stream = c.stream();
  LOOM_RETURN_IF_ERROR(CudaErrorStatus(kern::RmsNormBackward(a), "rmsnorm_backward"));
  LOOM_ASSIGN_OR_RETURN(y, ToHostSync(c, y));
  LOOM_ASSIGN_OR_RETURN(rs, ToHostSync(c, rs));
  LOOM_ASSIGN_OR_RETURN(dx, ToHostSync(c, dx));
  LOOM_ASSIGN_OR_RETURN(dw, ToHostSync(c, dw));
  Errors e = {{"y", RelErr(y.ToVector(), ry)},
              {"rstd", RelErr(rs.ToVector(), rrs)},
              {"dx", RelErr(dx.ToVector(), rdx)},
              {"dw", RelErr(dw.ToVector(), rdw)}};
  if (copy) {
    LOOM_ASSIGN_OR_RETURN(dx16, ToHostSync(c, dx16));
    e.push_back({"dx_bf16 vs dx rounded", RelErr(dx16.ToVector(), dx.To(DType::kBF16).ToVector())});
  }
  return e;
}

// With D % 8 == 0 and aligned buffers Rope takes its vector path; the same
// rotation of `x` through buffers one element off 16-byte alignment takes
// the per-pair path and must give `vec_y` bitwise.
absl::Status CheckRopePairPath(Checker& c, DType dt, int64_t B, int64_t T, int64_t H, int64_t D, const float* table,
                               const Vec& x, const Vec& vec_y) {
  const int64_t n = B * T * H * D;
  Vec padded(n + 8, 0.0);
  std::copy(x.begin(), x.end(), padded.begin() + 1);
  LOOM_ASSIGN_OR_RETURN(Tensor dx, c.Up(Tensor::FromVector({n + 8}, padded, dt)));
  LOOM_ASSIGN_OR_RETURN(Tensor dy, c.Poisoned({n + 8}, dt));
  const int64_t es = dt == DType::kBF16 ? 2 : 4;
  const kern::Dt k = dt == DType::kBF16 ? kern::kBF16 : kern::kF32;
  LOOM_RETURN_IF_ERROR(CudaErrorStatus(kern::Rope(k, B, T, H, D, false, table, static_cast<char*>(dx.raw_data()) + es,
                                                  static_cast<char*>(dy.raw_data()) + es, c.stream()),
                                       "rope, unaligned"));
  LOOM_ASSIGN_OR_RETURN(dy, ToHostSync(c, dy));
  const Vec pair_y = dy.ToVector();
  for (int64_t i = 0; i < n; ++i) {
    if (pair_y[i + 1] != vec_y[i]) {
      return absl::InternalError(absl::StrCat("rope: the per-pair path gives ", pair_y[i + 1], " at element ", i,
                                              ", the vector path ", vec_y[i]));
    }
  }
  return absl::OkStatus();
}

// Rotary embedding (rope.h): the angle table, then the rotation (and its
// inverse) of x [B, T, H, D], against the f64 rotation by the f64 angles;
// with D % 8 == 0 also the per-pair path against the vector path, bitwise.
absl::StatusOr<Errors> CheckRope(Checker& c, DType dt, int64_t B, int64_t T, int64_t H, int64_t D, int64_t offset) {
  const double theta = 10000.0;
  HostInput x = c.Normal({B, T, H, D}, dt, 1.0);
  Vec ry(x.values.size()), rinv(x.values.size());
  for (int64_t p = 0; p < B * T * H * (D / 2); ++p) {
    const int64_t i = p % (D / 2), t = (p / ((D / 2) * H)) % T;
    const double a = static_cast<double>(offset + t) * std::pow(theta, -2.0 * static_cast<double>(i) / D);
    const double x0 = x.values[2 * p], x1 = x.values[2 * p + 1];
    ry[2 * p] = x0 * std::cos(a) - x1 * std::sin(a);
    ry[2 * p + 1] = x0 * std::sin(a) + x1 * std::cos(a);
    rinv[2 * p] = x0 * std::cos(a) + x1 * std::sin(a);
    rinv[2 * p + 1] = -x0 * std::sin(a) + x1 * std::cos(a);
  }
  LOOM_ASSIGN_OR_RETURN(Tensor dx, c.Up(x.host));
  LOOM_ASSIGN_OR_RETURN(Tensor table, c.Poisoned({kern::RopeTableFloats(T, D)}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor y, c.Poisoned({B, T, H, D}, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor yi, c.Poisoned({B, T, H, D}, dt));
  const kern::Dt k = dt == DType::kBF16 ? kern::kBF16 : kern::kF32;
  float* tp = static_cast<float*>(table.raw_data());
  LOOM_RETURN_IF_ERROR(CudaErrorStatus(kern::RopeTable(T, D, theta, offset, tp, c.stream()), "rope table"));
  LOOM_RETURN_IF_ERROR(
      CudaErrorStatus(kern::Rope(k, B, T, H, D, false, tp, dx.raw_data(), y.raw_data(), c.stream()), "rope"));
  LOOM_RETURN_IF_ERROR(
      CudaErrorStatus(kern::Rope(k, B, T, H, D, true, tp, dx.raw_data(), yi.raw_data(), c.stream()), "rope inverse"));
  LOOM_ASSIGN_OR_RETURN(y, ToHostSync(c, y));
  LOOM_ASSIGN_OR_RETURN(yi, ToHostSync(c, yi));
  const Vec yv = y.ToVector();
  if (D % 8 == 0) LOOM_RETURN_IF_ERROR(CheckRopePairPath(c, dt, B, T, H, D, tp, x.values, yv));
  return Errors{{"y", RelErr(yv, ry)}, {"inverse", RelErr(yi.ToVector(), rinv)}};
}

// Row sums and maxima (reductions.h RowReduce), run twice (bitwise rerun).
absl::StatusOr<Errors> CheckRowReduce(Checker& c, kern::RowReduceKind kind, DType dt, int64_t rows, int64_t cols) {
  HostInput x = c.Normal({rows, cols}, dt, 1.0, 0.25);
  Vec ref(rows, kind == kern::kRowMax ? -INFINITY : 0.0);
  for (int64_t i = 0; i < rows * cols; ++i)
    ref[i / cols] = kind == kern::kRowMax ? std::max(ref[i / cols], x.values[i]) : ref[i / cols] + x.values[i];
  LOOM_ASSIGN_OR_RETURN(Tensor dx, c.Up(x.host));
  Tensor out[2];
  for (Tensor& o : out) {
    LOOM_ASSIGN_OR_RETURN(o, c.Poisoned({rows}, DType::kF32));
    LOOM_RETURN_IF_ERROR(CudaErrorStatus(kern::RowReduce(kind, dt == DType::kBF16 ? kern::kBF16 : kern::kF32,
                                                         kern::kF32, rows, cols, dx.raw_data(), o.raw_data(),
                                                         c.stream()),
                                         "row_reduce"));
    LOOM_ASSIGN_OR_RETURN(o, ToHostSync(c, o));
  }
  return Errors{{"out", RelErr(out[0].ToVector(), ref)}, {"rerun", RerunBits(out[0], out[1])}};
}

// A vocabulary-parallel rank's one-hot block (embedding.h VocabOnehot): ids
// inside and outside the block and ignored ones; exact.
absl::StatusOr<Errors> CheckVocabOnehot(Checker& c, DType odt, DType idt, int64_t rows, int64_t cols, int64_t rank) {
  HostInput u = c.Uniform({rows}, DType::kF64, 0.0, 1.0);
  const int64_t ignore = -100, vocab = 4 * cols;
  std::vector<double> ids(rows);
  for (int64_t r = 0; r < rows; ++r)
    ids[r] = r % 7 == 3 ? static_cast<double>(ignore) : std::floor(u.values[r] * vocab);
  Vec ref_oh(rows * cols, 0.0), ref_ok(rows, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t id = static_cast<int64_t>(ids[r]);
    if (id == ignore) ref_ok[r] = 0.0;
    else if (id >= rank * cols && id < (rank + 1) * cols) ref_oh[r * cols + id - rank * cols] = 1.0;
  }
  LOOM_ASSIGN_OR_RETURN(Tensor d_ids, c.Up(Tensor::FromVector({rows}, ids, idt)));
  LOOM_ASSIGN_OR_RETURN(Tensor oh, c.Poisoned({rows, cols}, odt));
  LOOM_ASSIGN_OR_RETURN(Tensor ok, c.Poisoned({rows}, odt));
  const kern::Dt o = odt == DType::kBF16 ? kern::kBF16 : kern::kF32, it = idt == DType::kI64 ? kern::kI64 : kern::kI32;
  LOOM_RETURN_IF_ERROR(CudaErrorStatus(
      kern::VocabOnehot(it, o, o, rows, cols, rank, ignore, d_ids.raw_data(), oh.raw_data(), ok.raw_data(), c.stream()),
      "vocab_onehot"));
  LOOM_ASSIGN_OR_RETURN(oh, ToHostSync(c, oh));
  LOOM_ASSIGN_OR_RETURN(ok, ToHostSync(c, ok));
  return Errors{{"onehot", RelErr(oh.ToVector(), ref_oh)}, {"valid", RelErr(ok.ToVector(), ref_ok)}};
}

// f32 and bf16 gradients, aligned and not, sizes that end mid-chunk.
absl::StatusOr<Errors> CheckGradNorm(Checker& c) {
  struct T {
    int64_t n;
    DType dt;
    int64_t offset;
  };
  const std::vector<T> ts = {{768, DType::kF32, 0},         {65536 * 3 + 5, DType::kF32, 0},
                             {1000003, DType::kF32, 1},     {2304, DType::kBF16, 0},
                             {65536 + 7, DType::kBF16, 0},  {99999, DType::kBF16, 3},
                             {768 * 3072, DType::kF32, 0},  {1, DType::kF32, 0}};
  double ref = 0;
  std::vector<Tensor> bufs;
  std::vector<kern::GradNormEntry> entries;
  for (const T& t : ts) {
    HostInput h = c.Normal({t.n + t.offset}, t.dt, 1.0);
    for (int64_t i = t.offset; i < t.n + t.offset; ++i) ref += h.values[i] * h.values[i];
    LOOM_ASSIGN_OR_RETURN(Tensor d, c.Up(h.host));
    kern::GradNormEntry e;
    e.x = static_cast<const char*>(d.raw_data()) + t.offset * DTypeSize(t.dt);
    e.numel = t.n;
    e.dt = t.dt == DType::kBF16 ? kern::kBF16 : kern::kF32;
    entries.push_back(e);
    bufs.push_back(std::move(d));
  }
  void *de = nullptr, *dc = nullptr;
  int64_t chunks = 0;
  LOOM_RETURN_IF_ERROR(CudaErrorStatus(
      kern::GradNormUpload(entries.data(), static_cast<int>(entries.size()), &de, &dc, &chunks), "grad_norm upload"));
  std::unique_ptr<void, void (*)(void*)> keep_e(de, FreeDevice), keep_c(dc, FreeDevice);
  LOOM_ASSIGN_OR_RETURN(Tensor partials, c.Poisoned({std::max<int64_t>(chunks, 1)}, DType::kF32));
  Tensor out[2];
  for (Tensor& o : out) {
    LOOM_ASSIGN_OR_RETURN(o, c.Poisoned({1}, DType::kF32));
    LOOM_RETURN_IF_ERROR(CudaErrorStatus(kern::GradNormMulti(de, dc, chunks, static_cast<float*>(partials.raw_data()),
                                                             static_cast<float*>(o.raw_data()), c.stream()),
                                         "grad_norm"));
    LOOM_ASSIGN_OR_RETURN(o, ToHostSync(c, o));
  }
  return Errors{{"norm", RelErr(out[0].ToVector(), {std::sqrt(ref)})}, {"rerun", RerunBits(out[0], out[1])}};
}

// ---- Cross-entropy (cross_entropy.h) ---------------------------------------------
// Every 7th row ignored (-100); dloss 0.7. fused: CrossEntropyFused, else the
// forward then the backward. Outputs run twice must be bit-identical.
absl::StatusOr<Errors> CheckCrossEntropy(Checker& c, DType dt, DType tdt, int64_t rows, int64_t vocab, bool fused) {
  HostInput logits = c.Normal({rows, vocab}, dt, 2.0);
  HostInput u = c.Uniform({rows}, DType::kF64, 0.0, 1.0);
  std::vector<int32_t> t(rows);
  std::vector<double> tv(rows);
  int valid = 0;
  for (int64_t r = 0; r < rows; ++r) {
    t[r] = r % 7 == 3 ? -100 : static_cast<int32_t>(u.values[r] * vocab) % vocab;
    tv[r] = t[r];
    valid += t[r] >= 0;
  }
  const double dloss = 0.7;
  Vec rl, rdl, rlse;
  ref::CrossEntropy(rows, vocab, logits.values, t, dloss / std::max(valid, 1), &rl, &rdl, &rlse);
  double rloss = 0;
  for (double l : rl) rloss += l;
  rloss /= std::max(valid, 1);
  LOOM_ASSIGN_OR_RETURN(Tensor d_logits, c.Up(logits.host));
  LOOM_ASSIGN_OR_RETURN(Tensor d_t, c.Up(Tensor::FromVector({rows}, tv, tdt)));
  LOOM_ASSIGN_OR_RETURN(Tensor d_dloss, c.Up(Tensor::FromVector({1}, {dloss}, DType::kF32)));
  LOOM_ASSIGN_OR_RETURN(Tensor ws, c.Poisoned({rows + 1}, DType::kF32));
  const kern::Dt ldt = dt == DType::kBF16 ? kern::kBF16 : kern::kF32, kt = tdt == DType::kI64 ? kern::kI64 : kern::kI32;
  const float* dl = static_cast<const float*>(d_dloss.raw_data());
  float* w = static_cast<float*>(ws.raw_data());
  Tensor loss, lse, grad[2];
  for (Tensor& g : grad) {
    LOOM_ASSIGN_OR_RETURN(loss, c.Poisoned({1}, DType::kF32));
    LOOM_ASSIGN_OR_RETURN(lse, c.Poisoned({rows}, DType::kF32));
    LOOM_ASSIGN_OR_RETURN(g, c.Poisoned({rows, vocab}, dt));
    float* pl = static_cast<float*>(loss.raw_data());
    float* pe = static_cast<float*>(lse.raw_data());
    int e = fused ? kern::CrossEntropyFused(ldt, kt, rows, vocab, dl, d_logits.raw_data(), d_t.raw_data(), -100, pe,
                                            pl, g.raw_data(), w, c.stream())
                  : kern::CrossEntropyForward(ldt, kt, rows, vocab, d_logits.raw_data(), d_t.raw_data(), -100, pe,
                                              w, pl, c.stream());
    if (e == 0 && !fused)
      e = kern::CrossEntropyBackward(ldt, kt, rows, vocab, dl, d_logits.raw_data(), d_t.raw_data(), pe, -100,
                                     g.raw_data(), w + rows, c.stream());
    LOOM_RETURN_IF_ERROR(CudaErrorStatus(e, "cross_entropy"));
    LOOM_ASSIGN_OR_RETURN(g, ToHostSync(c, g));
  }
  LOOM_ASSIGN_OR_RETURN(Vec ol, c.Down(loss));
  LOOM_ASSIGN_OR_RETURN(Vec oe, c.Down(lse));
  return Errors{{"loss", RelErr(ol, {rloss})},
                {"lse", RelErr(oe, rlse)},
                {"dlogits", RelErr(grad[0].ToVector(), rdl)},
                {"rerun", RerunBits(grad[0], grad[1])}};
}

// ---- Embedding backward (embedding.h) -------------------------------------------
// `rows` ids drawn from the first `distinct` ids of the table (few distinct:
// many repeats), every 11th row out of range (-1 or vocab: adds nothing).
// Against the fp64 sums; the sorted kernel also runs twice ("rerun": the same
// bits) and must equal, bit for bit, the f32 sum of each id's rows in
// ascending row order from 0 ("row order"), the order embedding.h documents.
absl::StatusOr<Errors> CheckEmbeddingBwd(Checker& c, DType dt, DType idt, int64_t rows, int64_t cols, int64_t vocab,
                                         int64_t distinct, kern::EmbeddingBwdMode mode) {
  HostInput dy = c.Normal({rows, cols}, dt, 1.0);
  HostInput u = c.Uniform({rows}, DType::kF64, 0.0, 1.0);
  std::vector<double> ids(rows);
  for (int64_t r = 0; r < rows; ++r)
    ids[r] = r % 11 == 5 ? (r % 2 ? -1.0 : static_cast<double>(vocab))
                         : static_cast<double>(static_cast<int64_t>(u.values[r] * distinct) % distinct);
  Vec ref(vocab * cols, 0.0);
  std::vector<float> ordered(vocab * cols, 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t id = static_cast<int64_t>(ids[r]);
    if (id < 0 || id >= vocab) continue;
    for (int64_t k = 0; k < cols; ++k) {
      ref[id * cols + k] += dy.values[r * cols + k];
      ordered[id * cols + k] += static_cast<float>(dy.values[r * cols + k]);
    }
  }
  LOOM_ASSIGN_OR_RETURN(Tensor d_dy, c.Up(dy.host));
  LOOM_ASSIGN_OR_RETURN(Tensor d_ids, c.Up(Tensor::FromVector({rows}, ids, idt)));
  size_t ws_bytes = 0;
  LOOM_RETURN_IF_ERROR(CudaErrorStatus(kern::EmbeddingBackwardWorkspaceBytes(mode, rows, vocab, &ws_bytes),
                                       "embedding_backward workspace"));
  LOOM_ASSIGN_OR_RETURN(Tensor ws, c.Poisoned({static_cast<int64_t>(ws_bytes / 4 + 1)}, DType::kF32));
  const kern::Dt ddt = dt == DType::kBF16 ? kern::kBF16 : kern::kF32, kt = idt == DType::kI64 ? kern::kI64 : kern::kI32;
  Tensor out[2];
  for (Tensor& o : out) {
    LOOM_ASSIGN_OR_RETURN(o, c.Poisoned({vocab, cols}, DType::kF32));
    LOOM_RETURN_IF_ERROR(CudaErrorStatus(
        kern::EmbeddingBackward(ddt, kt, rows, cols, vocab, d_dy.raw_data(), d_ids.raw_data(),
                                static_cast<float*>(o.raw_data()), c.stream(), mode, ws.raw_data(), ws_bytes),
        "embedding_backward"));
    LOOM_ASSIGN_OR_RETURN(o, ToHostSync(c, o));
  }
  Errors e = {{"dw", RelErr(out[0].ToVector(), ref)}};
  if (mode == kern::kEmbBwdSorted) {
    e.push_back({"rerun", RerunBits(out[0], out[1])});
    const bool same = std::memcmp(out[0].raw_data(), ordered.data(), ordered.size() * sizeof(float)) == 0;
    e.push_back({"row order", same ? 0.0 : INFINITY});
  }
  return e;
}

void AddEmbeddingChecks(Checker& c, const RunFn& run) {
  struct EmbCase {
    DType dt, idt;
    int64_t rows, cols, vocab, distinct;
  };
  const DType bf = DType::kBF16, f32 = DType::kF32;
  // GPT-2's table at B16 T1024 (all ids), a handful of ids repeated thousands
  // of times, odd columns over a tiny table, one row.
  const std::vector<EmbCase> cases = {{bf, DType::kI64, 16384, 768, 50304, 50304},
                                      {f32, DType::kI32, 16384, 768, 50304, 7},
                                      {f32, DType::kI64, 1000, 33, 5, 5},
                                      {bf, DType::kI32, 1, 64, 10, 10}};
  for (kern::EmbeddingBwdMode mode : {kern::kEmbBwdSorted, kern::kEmbBwdAtomic})
    for (const EmbCase& e : cases)
      run(mode == kern::kEmbBwdSorted ? "embedding_backward sorted" : "embedding_backward atomic", e.dt,
          absl::StrCat(ShapeStr({{"rows", e.rows}, {"cols", e.cols}, {"vocab", e.vocab}, {"ids", e.distinct}}), " ",
                       DTypeName(e.idt)),
          1e-4, [&] { return CheckEmbeddingBwd(c, e.dt, e.idt, e.rows, e.cols, e.vocab, e.distinct, mode); });
}

// The step-kernel rows of the table (column sums, grad norm, cross-entropy,
// embedding backward).
void AddStepKernelChecks(Checker& c, const RunFn& run) {
  const DType bf = DType::kBF16, f32 = DType::kF32;
  struct SumCase {
    DType dt;
    int64_t rows, cols, offset;
  };
  // bf16 aligned, cols % 8 == 0: the 16-byte kernel (70000 rows: more than 256
  // parts of 128); unaligned and f32: one column per thread.
  for (const SumCase& s : std::vector<SumCase>{{bf, 16384, 768, 0}, {bf, 16384, 2304, 0}, {bf, 16384, 3072, 0},
                                               {bf, 70000, 136, 0}, {bf, 37, 200, 0}, {bf, 300, 768, 1},
                                               {f32, 513, 100, 0}})
    run("sum_rows -> f32", s.dt, absl::StrCat(ShapeStr({{"rows", s.rows}, {"cols", s.cols}}), s.offset ? " +1" : ""),
        1e-5, [&] { return CheckSumRows(c, s.dt, s.rows, s.cols, s.offset); });
  run("grad_norm multi-tensor (8 tensors)", f32, "f32+bf16, aligned or not", 1e-5, [&] { return CheckGradNorm(c); });
  struct CeCase {
    DType dt, tdt;
    int64_t rows, vocab;
  };
  // bf16, vocab % 8 == 0: the vectorised kernels (fused: the row in shared
  // memory); vocab % 8 != 0 and f32: the one-element kernels.
  for (bool fused : {true, false})
    for (const CeCase& e : std::vector<CeCase>{{bf, DType::kI64, 64, 50304}, {bf, DType::kI32, 33, 1000},
                                               {bf, DType::kI64, 20, 1003}, {f32, DType::kI32, 17, 5000}})
      run(fused ? "cross_entropy fused fwd+bwd" : "cross_entropy fwd, bwd", e.dt,
          absl::StrCat(ShapeStr({{"rows", e.rows}, {"vocab", e.vocab}}), " ", DTypeName(e.tdt)),
          e.dt == f32 ? 1e-4 : 1e-2, [&] { return CheckCrossEntropy(c, e.dt, e.tdt, e.rows, e.vocab, fused); });
  AddEmbeddingChecks(c, run);
  run("rope (table) fwd, inverse", bf, "B=2 T=2048 H=32 D=64", 1e-2,
      [&] { return CheckRope(c, bf, 2, 2048, 32, 64, 0); });
  run("rope (table) fwd, inverse", f32, "B=2 T=37 H=3 D=128 offset=5", 1e-5,
      [&] { return CheckRope(c, f32, 2, 37, 3, 128, 5); });
  run("rope (table) fwd, inverse, per pair", bf, "B=1 T=33 H=5 D=12", 1e-2,
      [&] { return CheckRope(c, bf, 1, 33, 5, 12, 0); });
  for (bool residual : {false, true}) {
    // bf16 with cols % 8 == 0 takes the vector path (1, 1 and 4 vectors a
    // thread; 333 rows put several rows on each block), and so does f32 with
    // cols % 8 == 0 in the backward; the rest the other.
    for (const SumCase& s : std::vector<SumCase>{{bf, 4096, 2048, 0}, {bf, 333, 768, 0}, {bf, 64, 5120, 0},
                                                 {bf, 50, 100, 0}, {f32, 300, 768, 0}, {f32, 7, 37, 0}})
      run(residual ? "rmsnorm fwd, bwd + residual" : "rmsnorm fwd, bwd", s.dt,
          ShapeStr({{"rows", s.rows}, {"cols", s.cols}}), s.dt == f32 ? 1e-4 : 1e-2,
          [&] { return CheckRmsNorm(c, s.dt, s.dt, s.rows, s.cols, residual, false); });
    // The f32 residual stream: bf16 dy, f32 x and dx, and dx's bf16 copy
    // (the vector path; 100 columns the other).
    for (const SumCase& s : std::vector<SumCase>{{f32, 4096, 2048, 0}, {f32, 64, 5120, 0}, {f32, 50, 100, 0}})
      run(residual ? "rmsnorm bwd (bf16 dy, f32 stream) + residual, bf16 copy"
                   : "rmsnorm bwd (bf16 dy, f32 stream), bf16 copy",
          s.dt, ShapeStr({{"rows", s.rows}, {"cols", s.cols}}), 1e-4,
          [&] { return CheckRmsNorm(c, f32, bf, s.rows, s.cols, residual, true); });
  }
  // Row sums and maxima: a vocabulary block's rows, one row of everything, odd columns.
  for (kern::RowReduceKind kind : {kern::kRowSum, kern::kRowMax})
    for (const SumCase& s : std::vector<SumCase>{{bf, 1024, 25152, 0}, {f32, 1, 100003, 0}, {f32, 513, 77, 0}})
      run(kind == kern::kRowMax ? "row_reduce max" : "row_reduce sum", s.dt,
          ShapeStr({{"rows", s.rows}, {"cols", s.cols}}), s.dt == f32 ? 1e-5 : 1e-4,
          [&] { return CheckRowReduce(c, kind, s.dt, s.rows, s.cols); });
  for (DType odt : {f32, bf})
    run("vocab_onehot (rank 1)", odt, "rows=4099 cols=333", 0.0,
        [&] { return CheckVocabOnehot(c, odt, DType::kI32, 4099, 333, 1); });
}
#else
void AddStepKernelChecks(Checker&, const RunFn&) {}  // the raw kernels exist only in CUDA builds
#endif

}  // namespace

const char* KernelSourceHash() { return LOOM_CUDA_KERNEL_SOURCE_HASH; }

absl::StatusOr<std::vector<CheckResult>> RunKernelChecks(const CheckOptions& opts) {
  LOOM_RETURN_IF_ERROR(CudaAvailable());
  LOOM_ASSIGN_OR_RETURN(DeviceRuntime * rt, DeviceRuntime::Get(0));
  LOOM_RETURN_IF_ERROR(rt->MakeCurrent());
  Checker c(rt, opts.seed);
  std::vector<CheckResult> rows;
  const auto start = std::chrono::steady_clock::now();
  auto run = [&](std::string name, DType dt, std::string shape, double tol,
                 const std::function<absl::StatusOr<Errors>()>& fn) {
    if (opts.progress) {
      const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
      std::fprintf(stderr, "[%7.1f s] %s %s %s\n", t.count(), name.c_str(), std::string(DTypeName(dt)).c_str(),
                   shape.c_str());
    }
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
  // Accumulating into D (beta 1): the input-gradient GEMMs of a sum (tB=1).
  for (const GemmCase& g : std::vector<GemmCase>{{DType::kBF16, 256, 1024, 2816, false, true, Epilogue::kNone},
                                                 {DType::kF32, 192, 320, 256, false, true, Epilogue::kNone}})
    run(absl::StrCat("gemm accumulate (beta 1) tA=", g.ta, " tB=", g.tb), g.dtype,
        ShapeStr({{"m", g.m}, {"n", g.n}, {"k", g.k}}), Tol(g.dtype), [&] { return CheckGemmAccumulate(c, g); });
  for (DType dt : {DType::kF32, DType::kBF16}) {
    struct LnCase {
      int64_t rows, cols;
    };
    // 512x768, 16384x768 (the GPT-2 shape: the vectorised kernel in bf16,
    // several rows per warp), 37x200 (a narrow odd width: a warp per row),
    // 5000x384, and 1000x4100 (wider than 1024: a block per row).
    for (const LnCase& l : std::vector<LnCase>{{512, 768}, {16384, 768}, {37, 200}, {5000, 384}, {1000, 4100}})
      run("layernorm_backward +dresidual", dt, ShapeStr({{"rows", l.rows}, {"cols", l.cols}}), Tol(dt),
          [&] { return CheckLayerNormBwd(c, dt, l.rows, l.cols); });
  }
  AddStepKernelChecks(c, run);
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

}  // namespace loom::kernels::cuda
