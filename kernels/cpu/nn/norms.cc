// layernorm, rmsnorm and their backward ops (see kernels/cpu/nn/nn_ops.h).
//
//   layernorm(x[..., C], w[C], b[C]) attr eps (default 1e-5) -> (y, mean[...], rstd[...])
//       y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps) (biased var)
//   layernorm_backward(dy, x, w, mean, rstd) -> (dx, dw, db)
//   rmsnorm(x[..., C], w[C]) attr eps (default 1e-6) -> (y, rstd[...])
//       y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps)
//   rmsnorm_backward(dy, x, w, rstd) -> (dx, dw)
// mean/rstd are saved statistics: the grad rules differentiate y only (a
// gradient arriving at mean or rstd is ignored). Rows run in parallel; dw/db are
// summed over fixed chunks of 32 rows in f32, then across chunks in f64 in chunk order, so results do
// not depend on the thread count.
#include <cmath>

#include "base/thread_pool.h"
#include "kernels/cpu/nn/common.h"

namespace loom::kernels::cpu::nn::internal {
namespace {

constexpr int64_t kChunkRows = 32;

Shape RowShape(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

absl::Status CheckEps(const Attrs& a, double def) {
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "eps", AttrKind::kFloat));
  double eps = a.GetFloat("eps", def);
  if (!(eps >= 0)) return absl::InvalidArgumentError(absl::StrCat("eps: expected >= 0, got ", eps));
  return absl::OkStatus();
}

// x[..., C] and the [C] parameters named in `params` (starting at index 1 of in).
absl::Status CheckXAndParams(absl::Span<const TensorMeta> in, const char* xname, int x_at,
                             std::initializer_list<std::pair<const char*, int>> params) {
  const TensorMeta& x = in[x_at];
  LOOM_RETURN_IF_ERROR(ExpectFloat(x, xname));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(x, xname, 1));
  int64_t c = x.shape.back();
  for (auto [name, i] : params) {
    LOOM_RETURN_IF_ERROR(ExpectSameDType(in[i], name, x, xname));
    if (in[i].shape.size() != 1 || in[i].shape[0] != c)
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected shape [", c, "] (the last dim of ", xname,
                                                     "), got ", ShapeToString(in[i].shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckStats(absl::Span<const TensorMeta> in, int x_at, std::initializer_list<std::pair<const char*, int>> stats) {
  Shape rows = RowShape(in[x_at].shape);
  for (auto [name, i] : stats) {
    LOOM_RETURN_IF_ERROR(ExpectSameDType(in[i], name, in[x_at], "x"));
    if (in[i].shape != rows)
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected shape ", ShapeToString(rows),
                                                     " (x without its last dim), got ", ShapeToString(in[i].shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorMeta>> InferLayerNorm(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 3));
  LOOM_RETURN_IF_ERROR(CheckEps(a, 1e-5));
  LOOM_RETURN_IF_ERROR(CheckXAndParams(in, "x", 0, {{"w", 1}, {"b", 2}}));
  TensorMeta stat{in[0].dtype, RowShape(in[0].shape)};
  return std::vector<TensorMeta>{in[0], stat, stat};
}

absl::StatusOr<std::vector<TensorMeta>> InferLayerNormBackward(absl::Span<const TensorMeta> in, const Attrs&) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 5));
  LOOM_RETURN_IF_ERROR(CheckXAndParams(in, "x", 1, {{"w", 2}}));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in[0], "dy", in[1], "x"));
  LOOM_RETURN_IF_ERROR(ExpectSameShape(in[0], "dy", in[1], "x"));
  LOOM_RETURN_IF_ERROR(CheckStats(in, 1, {{"mean", 3}, {"rstd", 4}}));
  return std::vector<TensorMeta>{in[1], in[2], in[2]};
}

absl::StatusOr<std::vector<TensorMeta>> InferRmsNorm(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 2));
  LOOM_RETURN_IF_ERROR(CheckEps(a, 1e-6));
  LOOM_RETURN_IF_ERROR(CheckXAndParams(in, "x", 0, {{"w", 1}}));
  return std::vector<TensorMeta>{in[0], TensorMeta{in[0].dtype, RowShape(in[0].shape)}};
}

absl::StatusOr<std::vector<TensorMeta>> InferRmsNormBackward(absl::Span<const TensorMeta> in, const Attrs&) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 4));
  LOOM_RETURN_IF_ERROR(CheckXAndParams(in, "x", 1, {{"w", 2}}));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in[0], "dy", in[1], "x"));
  LOOM_RETURN_IF_ERROR(ExpectSameShape(in[0], "dy", in[1], "x"));
  LOOM_RETURN_IF_ERROR(CheckStats(in, 1, {{"rstd", 3}}));
  return std::vector<TensorMeta>{in[1], in[2]};
}

// ---- References (f64, one row at a time) ----
absl::Status LayerNormRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  double eps = a.GetFloat("eps", 1e-5);
  Tensor x = AsF64(in[0]), w = AsF64(in[1]), b = AsF64(in[2]);
  int64_t c = x.shape().back(), rows = LeadingRows(x.shape());
  Tensor y = NewF64(x.shape()), mean = NewF64(RowShape(x.shape())), rstd = NewF64(RowShape(x.shape()));
  const double *px = x.data<double>(), *pw = w.data<double>(), *pb = b.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = px + r * c;
    double mu = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mu += xr[j];
    mu /= c;
    for (int64_t j = 0; j < c; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= c;
    double rs = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < c; ++j) y.data<double>()[r * c + j] = (xr[j] - mu) * rs * pw[j] + pb[j];
    mean.data<double>()[r] = mu;
    rstd.data<double>()[r] = rs;
  }
  LOOM_RETURN_IF_ERROR(Store(out[0], y));
  LOOM_RETURN_IF_ERROR(Store(out[1], mean));
  return Store(out[2], rstd);
}

absl::Status LayerNormBackwardRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  Tensor dy = AsF64(in[0]), x = AsF64(in[1]), w = AsF64(in[2]), mean = AsF64(in[3]), rstd = AsF64(in[4]);
  int64_t c = x.shape().back(), rows = LeadingRows(x.shape());
  Tensor dx = NewF64(x.shape()), dw = NewF64(w.shape()), db = NewF64(w.shape());
  const double *pdy = dy.data<double>(), *px = x.data<double>(), *pw = w.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double mu = mean.data<double>()[r], rs = rstd.data<double>()[r];
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      double xhat = (px[r * c + j] - mu) * rs, g = pdy[r * c + j] * pw[j];
      mean_g += g / c;
      mean_gx += g * xhat / c;
      dw.data<double>()[j] += pdy[r * c + j] * xhat;
      db.data<double>()[j] += pdy[r * c + j];
    }
    for (int64_t j = 0; j < c; ++j) {
      double xhat = (px[r * c + j] - mu) * rs, g = pdy[r * c + j] * pw[j];
      dx.data<double>()[r * c + j] = rs * (g - mean_g - xhat * mean_gx);
    }
  }
  LOOM_RETURN_IF_ERROR(Store(out[0], dx));
  LOOM_RETURN_IF_ERROR(Store(out[1], dw));
  return Store(out[2], db);
}

absl::Status RmsNormRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  double eps = a.GetFloat("eps", 1e-6);
  Tensor x = AsF64(in[0]), w = AsF64(in[1]);
  int64_t c = x.shape().back(), rows = LeadingRows(x.shape());
  Tensor y = NewF64(x.shape()), rstd = NewF64(RowShape(x.shape()));
  const double *px = x.data<double>(), *pw = w.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < c; ++j) ms += px[r * c + j] * px[r * c + j];
    double rs = 1 / std::sqrt(ms / c + eps);
    for (int64_t j = 0; j < c; ++j) y.data<double>()[r * c + j] = px[r * c + j] * rs * pw[j];
    rstd.data<double>()[r] = rs;
  }
  LOOM_RETURN_IF_ERROR(Store(out[0], y));
  return Store(out[1], rstd);
}

absl::Status RmsNormBackwardRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  Tensor dy = AsF64(in[0]), x = AsF64(in[1]), w = AsF64(in[2]), rstd = AsF64(in[3]);
  int64_t c = x.shape().back(), rows = LeadingRows(x.shape());
  Tensor dx = NewF64(x.shape()), dw = NewF64(w.shape());
  const double *pdy = dy.data<double>(), *px = x.data<double>(), *pw = w.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double rs = rstd.data<double>()[r], mean_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      double xhat = px[r * c + j] * rs;
      mean_gx += pdy[r * c + j] * pw[j] * xhat / c;
      dw.data<double>()[j] += pdy[r * c + j] * xhat;
    }
    for (int64_t j = 0; j < c; ++j)
      dx.data<double>()[r * c + j] = rs * (pdy[r * c + j] * pw[j] - px[r * c + j] * rs * mean_gx);
  }
  LOOM_RETURN_IF_ERROR(Store(out[0], dx));
  return Store(out[1], dw);
}

// ---- Fast f32 kernels ----
absl::Status LayerNormKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  const float eps = static_cast<float>(a.GetFloat("eps", 1e-5));
  const float *x = in[0].data<float>(), *w = in[1].data<float>(), *b = in[2].data<float>();
  float *y = out[0].data<float>(), *mean = out[1].data<float>(), *rstd = out[2].data<float>();
  const int64_t c = in[0].shape().back(), rows = LeadingRows(in[0].shape());
  ParallelFor(rows, RowGrain(c), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * c;
      float* yr = y + r * c;
      const float mu = static_cast<float>(BlockSum(c, [=](int64_t j) { return xr[j]; }) / c);
      const double var = BlockSum(c, [=](int64_t j) { return (xr[j] - mu) * (xr[j] - mu); }) / c;
      const float rs = static_cast<float>(1.0 / std::sqrt(var + eps));
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) yr[j] = (xr[j] - mu) * rs * w[j] + b[j];
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
  return absl::OkStatus();
}

// Column sums over rows in fixed chunks of kChunkRows: row_fn(r, acc) adds row
// r's contribution into k f32 arrays of length c (one set per chunk); chunks are
// then summed in f64, in chunk order, into `outs`.
template <typename RowFn>
void ChunkedColumnSums(int64_t rows, int64_t c, int k, absl::Span<float* const> outs, RowFn row_fn) {
  const int64_t nchunks = std::max<int64_t>(1, (rows + kChunkRows - 1) / kChunkRows);
  std::vector<float> part(static_cast<size_t>(nchunks) * k * c, 0.0f);
  ParallelFor(nchunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t ch = lo; ch < hi; ++ch) {
      float* acc = part.data() + ch * k * c;
      for (int64_t r = ch * kChunkRows; r < std::min(rows, (ch + 1) * kChunkRows); ++r) row_fn(r, acc);
    }
  });
  ParallelFor(c, 1024, [&](int64_t lo, int64_t hi) {
    for (int q = 0; q < k; ++q)
      for (int64_t j = lo; j < hi; ++j) {
        double s = 0;
        for (int64_t ch = 0; ch < nchunks; ++ch) s += part[(ch * k + q) * c + j];
        outs[q][j] = static_cast<float>(s);
      }
  });
}

absl::Status LayerNormBackwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  const float *dy = in[0].data<float>(), *x = in[1].data<float>(), *w = in[2].data<float>();
  const float *mean = in[3].data<float>(), *rstd = in[4].data<float>();
  float *dx = out[0].data<float>(), *dw = out[1].data<float>(), *db = out[2].data<float>();
  const int64_t c = in[1].shape().back(), rows = LeadingRows(in[1].shape());
  float* const outs[2] = {dw, db};
  ChunkedColumnSums(rows, c, 2, outs, [&](int64_t r, float* acc) {
    const float *dyr = dy + r * c, *xr = x + r * c;
    float* dxr = dx + r * c;
    const float mu = mean[r], rs = rstd[r];
    const float mg = static_cast<float>(BlockSum(c, [=](int64_t j) { return dyr[j] * w[j]; }) / c);
    const float mgx =
        static_cast<float>(BlockSum(c, [=](int64_t j) { return dyr[j] * w[j] * (xr[j] - mu) * rs; }) / c);
    float* adw = acc;
    float* adb = acc + c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (xr[j] - mu) * rs;
      dxr[j] = rs * (dyr[j] * w[j] - mg - xhat * mgx);
      adw[j] += dyr[j] * xhat;
      adb[j] += dyr[j];
    }
  });
  return absl::OkStatus();
}

absl::Status RmsNormKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& a) {
  const double eps = a.GetFloat("eps", 1e-6);
  const float *x = in[0].data<float>(), *w = in[1].data<float>();
  float *y = out[0].data<float>(), *rstd = out[1].data<float>();
  const int64_t c = in[0].shape().back(), rows = LeadingRows(in[0].shape());
  ParallelFor(rows, RowGrain(c), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * c;
      float* yr = y + r * c;
      const double ms = BlockSum(c, [=](int64_t j) { return xr[j] * xr[j]; }) / c;
      const float rs = static_cast<float>(1.0 / std::sqrt(ms + eps));
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) yr[j] = xr[j] * rs * w[j];
      rstd[r] = rs;
    }
  });
  return absl::OkStatus();
}

absl::Status RmsNormBackwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  const float *dy = in[0].data<float>(), *x = in[1].data<float>(), *w = in[2].data<float>();
  const float* rstd = in[3].data<float>();
  float *dx = out[0].data<float>(), *dw = out[1].data<float>();
  const int64_t c = in[1].shape().back(), rows = LeadingRows(in[1].shape());
  float* const outs[1] = {dw};
  ChunkedColumnSums(rows, c, 1, outs, [&](int64_t r, float* acc) {
    const float *dyr = dy + r * c, *xr = x + r * c;
    float* dxr = dx + r * c;
    const float rs = rstd[r];
    const float mgx = static_cast<float>(BlockSum(c, [=](int64_t j) { return dyr[j] * w[j] * xr[j] * rs; }) / c);
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = xr[j] * rs;
      dxr[j] = rs * (dyr[j] * w[j] - xhat * mgx);
      acc[j] += dyr[j] * xhat;
    }
  });
  return absl::OkStatus();
}

// ---- Definitions ----
kernels::InputSpec F(Shape s, double lo = -2, double hi = 2) {
  kernels::InputSpec spec;
  spec.meta = {DType::kF32, std::move(s)};
  spec.lo = lo;
  spec.hi = hi;
  return spec;
}

kernels::OpDef MakeLayerNorm() {
  kernels::OpDef d;
  d.name = "layernorm";
  d.doc = "layernorm(x[..., C], w[C], b[C]) attr eps (default 1e-5) -> (y, mean[...], rstd[...])";
  d.num_inputs = 3;
  d.num_outputs = 3;
  d.infer = InferLayerNorm;
  d.reference = LayerNormRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(LayerNormKernel, LayerNormRef);
  d.grad = [](kernels::GradBuilder& bld, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    constexpr int kNone = kernels::GradBuilder::kNone;
    if (c.grad_outputs[0] == kNone) return std::vector<int>{kNone, kNone, kNone};
    return bld.Emit("layernorm_backward",
                    {c.grad_outputs[0], c.inputs[0], c.inputs[1], c.outputs[1], c.outputs[2]}, c.attrs);
  };
  d.cases.push_back({"rows7_C37", {F({7, 37}), F({37}), F({37})}, Attrs{{"eps", 1e-5}}, {0}});
  d.cases.push_back({"3x5x7_shifted", {F({3, 5, 7}, 3, 5), F({7}), F({7})}, Attrs{{"eps", 1e-3}}, {0}});
  d.cases.push_back({"C3_eps0.1", {F({4, 3}), F({3}), F({3})}, Attrs{{"eps", 0.1}}, {0}});
  return d;
}

kernels::OpDef MakeLayerNormBackward() {
  kernels::OpDef d;
  d.name = "layernorm_backward";
  d.doc = "layernorm_backward(dy, x, w, mean, rstd) -> (dx, dw, db)";
  d.num_inputs = 5;
  d.num_outputs = 3;
  d.infer = InferLayerNormBackward;
  d.reference = LayerNormBackwardRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(LayerNormBackwardKernel, LayerNormBackwardRef);
  d.no_grad_reason = "backward op of layernorm";
  d.cases.push_back({"rows7_C37", {F({7, 37}), F({7, 37}), F({37}), F({7}, -0.5, 0.5), F({7}, 0.5, 2)}, Attrs{}});
  d.cases.push_back(
      {"rows70_C5", {F({2, 35, 5}), F({2, 35, 5}), F({5}), F({2, 35}, -0.5, 0.5), F({2, 35}, 0.5, 2)}, Attrs{}});
  return d;
}

kernels::OpDef MakeRmsNorm() {
  kernels::OpDef d;
  d.name = "rmsnorm";
  d.doc = "rmsnorm(x[..., C], w[C]) attr eps (default 1e-6) -> (y, rstd[...])";
  d.num_inputs = 2;
  d.num_outputs = 2;
  d.infer = InferRmsNorm;
  d.reference = RmsNormRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(RmsNormKernel, RmsNormRef);
  d.grad = [](kernels::GradBuilder& bld, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    constexpr int kNone = kernels::GradBuilder::kNone;
    if (c.grad_outputs[0] == kNone) return std::vector<int>{kNone, kNone};
    return bld.Emit("rmsnorm_backward", {c.grad_outputs[0], c.inputs[0], c.inputs[1], c.outputs[1]}, c.attrs);
  };
  d.cases.push_back({"rows7_C37", {F({7, 37}), F({37})}, Attrs{{"eps", 1e-6}}, {0}});
  d.cases.push_back({"3x5x7", {F({3, 5, 7}), F({7})}, Attrs{{"eps", 1e-2}}, {0}});
  return d;
}

kernels::OpDef MakeRmsNormBackward() {
  kernels::OpDef d;
  d.name = "rmsnorm_backward";
  d.doc = "rmsnorm_backward(dy, x, w, rstd) -> (dx, dw)";
  d.num_inputs = 4;
  d.num_outputs = 2;
  d.infer = InferRmsNormBackward;
  d.reference = RmsNormBackwardRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(RmsNormBackwardKernel, RmsNormBackwardRef);
  d.no_grad_reason = "backward op of rmsnorm";
  d.cases.push_back({"rows7_C37", {F({7, 37}), F({7, 37}), F({37}), F({7}, 0.5, 2)}, Attrs{}});
  d.cases.push_back({"rows70_C5", {F({2, 35, 5}), F({2, 35, 5}), F({5}), F({2, 35}, 0.5, 2)}, Attrs{}});
  return d;
}

}  // namespace

LOOM_REGISTER_OP(MakeLayerNorm());
LOOM_REGISTER_OP(MakeLayerNormBackward());
LOOM_REGISTER_OP(MakeRmsNorm());
LOOM_REGISTER_OP(MakeRmsNormBackward());

}  // namespace loom::kernels::cpu::nn::internal
