#include "compiler/testing/test_ops.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/registry.h"

namespace loom::compiler::testing {
namespace {

using kernels::Attrs;
using kernels::GradBuilder;
using kernels::GradContext;
using kernels::OpDef;
using kernels::TensorMeta;
using V = GradBuilder::Value;

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeToString(a), " and ", ShapeToString(b),
                                                     " do not broadcast"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Offset of output element `lin` (row-major over out_shape) inside tensor t,
// which broadcasts to out_shape (right-aligned).
int64_t BroadcastOffset(const Tensor& t, const Shape& out_shape, int64_t lin) {
  int64_t off = t.offset();
  int nd = static_cast<int>(out_shape.size()), td = t.ndim();
  for (int d = nd - 1; d >= 0; --d) {
    int64_t c = lin % out_shape[d];
    lin /= out_shape[d];
    int k = d - (nd - td);
    if (k >= 0 && t.dim(k) != 1) off += c * t.stride(k);
  }
  return off;
}

template <typename F>
absl::Status Pointwise(absl::Span<const Tensor> in, Tensor& out, F f) {
  const Shape& s = out.shape();
  return VisitDType(out.dtype(), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* o = out.data<T>();
      std::vector<const T*> base;
      for (const Tensor& t : in) base.push_back(static_cast<const T*>(t.storage()->data()));
      for (int64_t i = 0; i < out.numel(); ++i) {
        double a = base[0][BroadcastOffset(in[0], s, i)];
        double b = in.size() > 1 ? double(base[1][BroadcastOffset(in[1], s, i)]) : 0.0;
        o[i] = static_cast<T>(f(a, b));
      }
      return absl::OkStatus();
    } else {
      return absl::InvalidArgumentError("test ops take f32 or f64");
    }
  });
}

absl::StatusOr<std::vector<TensorMeta>> InferBinary(absl::Span<const TensorMeta> in, const Attrs&) {
  if (in[0].dtype != in[1].dtype) return absl::InvalidArgumentError("b: dtype differs from a");
  LOOM_ASSIGN_OR_RETURN(Shape s, BroadcastShapes(in[0].shape, in[1].shape));
  return std::vector<TensorMeta>{{in[0].dtype, s}};
}
absl::StatusOr<std::vector<TensorMeta>> InferSame(absl::Span<const TensorMeta> in, const Attrs&) {
  return std::vector<TensorMeta>{in[0]};
}

// Gradient of a broadcast input: reduce to its shape when it differs.
absl::StatusOr<V> ReduceTo(GradBuilder& b, V g, V like) {
  if (b.Meta(g).shape == b.Meta(like).shape) return g;
  const Shape& s = b.Meta(like).shape;
  return b.Emit1("test.sum_to", {g}, Attrs{{"shape", std::vector<int64_t>(s.begin(), s.end())}});
}

template <typename F>
OpDef Elementwise(std::string name, int n_in, F f, kernels::GradFn grad) {
  OpDef d;
  d.name = std::move(name);
  d.num_inputs = n_in;
  d.infer = n_in == 2 ? kernels::InferFn(InferBinary) : kernels::InferFn(InferSame);
  d.elementwise = true;
  auto fn = [f](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) {
    return Pointwise(in, out[0], [&](double a, double b) { return f(a, b, attrs); });
  };
  d.reference = fn;
  d.kernels[DeviceKind::kCPU] = fn;
  d.grad = std::move(grad);
  if (!d.grad) d.no_grad_reason = "backward op";
  return d;
}

absl::Status SumTo(const Tensor& x, Tensor& out) {
  // out's shape broadcasts to x's; accumulate.
  std::vector<double> acc(out.numel(), 0.0);
  Shape xs = x.shape();
  Tensor o = out;
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t off = BroadcastOffset(out, xs, i) - out.offset();  // out is contiguous
    acc[off] += x.GetDouble(i);
  }
  for (int64_t i = 0; i < out.numel(); ++i) o.SetDouble(i, acc[i]);
  return absl::OkStatus();
}

Shape AttrShape(const Attrs& a) {
  std::vector<int64_t> v = a.GetInts("shape");
  return Shape(v.begin(), v.end());
}

absl::Status MatmulKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& attrs) {
  bool ta = attrs.GetBool("trans_a"), tb = attrs.GetBool("trans_b");
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  int64_t N = tb ? b.dim(0) : b.dim(1);
  Tensor o = out[0];
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double av = ta ? a.GetDouble(k * M + i) : a.GetDouble(i * K + k);
        double bv = tb ? b.GetDouble(j * K + k) : b.GetDouble(k * N + j);
        s += av * bv;
      }
      o.SetDouble(i * N + j, s);
    }
  return absl::OkStatus();
}

std::vector<OpDef> MakeOps() {
  std::vector<OpDef> defs;
  defs.push_back(Elementwise(
      "test.add", 2, [](double a, double b, const Attrs&) { return a + b; },
      [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
        V g = c.grad_outputs[0];
        LOOM_ASSIGN_OR_RETURN(V da, ReduceTo(b, g, c.inputs[0]));
        LOOM_ASSIGN_OR_RETURN(V db, ReduceTo(b, g, c.inputs[1]));
        return std::vector<V>{da, db};
      }));
  defs.push_back(Elementwise(
      "test.mul", 2, [](double a, double b, const Attrs&) { return a * b; },
      [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
        V g = c.grad_outputs[0];
        LOOM_ASSIGN_OR_RETURN(V ga, b.Emit1("test.mul", {g, c.inputs[1]}));
        LOOM_ASSIGN_OR_RETURN(V gb, b.Emit1("test.mul", {g, c.inputs[0]}));
        LOOM_ASSIGN_OR_RETURN(V da, ReduceTo(b, ga, c.inputs[0]));
        LOOM_ASSIGN_OR_RETURN(V db, ReduceTo(b, gb, c.inputs[1]));
        return std::vector<V>{da, db};
      }));
  defs.push_back(Elementwise(
      "test.relu_grad", 2, [](double dy, double x, const Attrs&) { return x > 0 ? dy : 0.0; }, nullptr));
  defs.push_back(Elementwise(
      "test.relu", 1, [](double a, double, const Attrs&) { return a > 0 ? a : 0.0; },
      [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
        LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("test.relu_grad", {c.grad_outputs[0], c.inputs[0]}));
        return std::vector<V>{d};
      }));
  defs.push_back(Elementwise(
      "test.exp", 1, [](double a, double, const Attrs&) { return std::exp(a); },
      [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
        LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("test.mul", {c.grad_outputs[0], c.outputs[0]}));
        return std::vector<V>{d};
      }));
  defs.push_back(Elementwise(
      "test.scale", 1, [](double a, double, const Attrs& at) { return a * at.GetFloat("s", 1.0); },
      [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
        LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("test.scale", {c.grad_outputs[0]}, c.attrs));
        return std::vector<V>{d};
      }));
  {
    OpDef d;
    d.name = "test.matmul";
    d.num_inputs = 2;
    d.infer = [](absl::Span<const TensorMeta> in, const Attrs& at) -> absl::StatusOr<std::vector<TensorMeta>> {
      if (in[0].shape.size() != 2) return absl::InvalidArgumentError("test.matmul: a: expected 2 dims");
      if (in[1].shape.size() != 2) return absl::InvalidArgumentError("test.matmul: b: expected 2 dims");
      bool ta = at.GetBool("trans_a"), tb = at.GetBool("trans_b");
      int64_t M = in[0].shape[ta ? 1 : 0], K = in[0].shape[ta ? 0 : 1];
      int64_t K2 = in[1].shape[tb ? 1 : 0], N = in[1].shape[tb ? 0 : 1];
      if (K != K2) return absl::InvalidArgumentError(absl::StrCat("test.matmul: b: inner dim ", K2, " != ", K));
      return std::vector<TensorMeta>{{in[0].dtype, {M, N}}};
    };
    d.reference = MatmulKernel;
    d.kernels[DeviceKind::kCPU] = MatmulKernel;
    d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
      bool ta = c.attrs.GetBool("trans_a"), tb = c.attrs.GetBool("trans_b");
      V g = c.grad_outputs[0], a = c.inputs[0], w = c.inputs[1];
      auto mm = [&](V x, V y, bool tx, bool ty) {
        return b.Emit1("test.matmul", {x, y}, Attrs{{"trans_a", tx}, {"trans_b", ty}});
      };
      absl::StatusOr<V> da, db;
      if (!ta && !tb) { da = mm(g, w, false, true); db = mm(a, g, true, false); }
      if (!ta && tb) { da = mm(g, w, false, false); db = mm(g, a, true, false); }
      if (ta && !tb) { da = mm(w, g, false, true); db = mm(a, g, false, false); }
      if (ta && tb) { da = mm(w, g, true, true); db = mm(g, a, true, true); }
      LOOM_RETURN_IF_ERROR(da.status());
      LOOM_RETURN_IF_ERROR(db.status());
      return std::vector<V>{*da, *db};
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.name = "test.sum";
    d.infer = [](absl::Span<const TensorMeta> in, const Attrs&) -> absl::StatusOr<std::vector<TensorMeta>> {
      return std::vector<TensorMeta>{{in[0].dtype, {}}};
    };
    d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
      double s = 0;
      for (int64_t i = 0; i < in[0].numel(); ++i) s += in[0].GetDouble(i);
      out[0].SetDouble(0, s);
      return absl::OkStatus();
    };
    d.kernels[DeviceKind::kCPU] = d.reference;
    d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
      const Shape& s = b.Meta(c.inputs[0]).shape;
      LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("test.broadcast_to", {c.grad_outputs[0]},
                                         Attrs{{"shape", std::vector<int64_t>(s.begin(), s.end())}}));
      return std::vector<V>{d};
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.name = "test.sum_to";
    d.infer = [](absl::Span<const TensorMeta> in, const Attrs& at) -> absl::StatusOr<std::vector<TensorMeta>> {
      Shape s = AttrShape(at);
      LOOM_ASSIGN_OR_RETURN(Shape b, BroadcastShapes(s, in[0].shape));
      if (b != in[0].shape) return absl::InvalidArgumentError("test.sum_to: shape: does not broadcast to x");
      return std::vector<TensorMeta>{{in[0].dtype, s}};
    };
    d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
      return SumTo(in[0], out[0]);
    };
    d.kernels[DeviceKind::kCPU] = d.reference;
    d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
      const Shape& s = b.Meta(c.inputs[0]).shape;
      LOOM_ASSIGN_OR_RETURN(V d, b.Emit1("test.broadcast_to", {c.grad_outputs[0]},
                                         Attrs{{"shape", std::vector<int64_t>(s.begin(), s.end())}}));
      return std::vector<V>{d};
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.name = "test.broadcast_to";
    d.infer = [](absl::Span<const TensorMeta> in, const Attrs& at) -> absl::StatusOr<std::vector<TensorMeta>> {
      Shape s = AttrShape(at);
      LOOM_ASSIGN_OR_RETURN(Shape b, BroadcastShapes(s, in[0].shape));
      if (b != s) return absl::InvalidArgumentError("test.broadcast_to: shape: x does not broadcast to it");
      return std::vector<TensorMeta>{{in[0].dtype, s}};
    };
    d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
      return Pointwise(in, out[0], [](double a, double) { return a; });
    };
    d.kernels[DeviceKind::kCPU] = d.reference;
    d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
      LOOM_ASSIGN_OR_RETURN(V d, ReduceTo(b, c.grad_outputs[0], c.inputs[0]));
      return std::vector<V>{d};
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.name = "test.dup";
    d.num_outputs = 2;
    d.infer = [](absl::Span<const TensorMeta> in, const Attrs&) -> absl::StatusOr<std::vector<TensorMeta>> {
      return std::vector<TensorMeta>{in[0], in[0]};
    };
    d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
      LOOM_RETURN_IF_ERROR(Pointwise(in, out[0], [](double a, double) { return a; }));
      return Pointwise(in, out[1], [](double a, double) { return 2 * a; });
    };
    d.kernels[DeviceKind::kCPU] = d.reference;
    d.grad = [](GradBuilder& b, const GradContext& c) -> absl::StatusOr<std::vector<V>> {
      V g0 = c.grad_outputs[0], g1 = c.grad_outputs[1];
      if (g1 != GradBuilder::kNone) {
        LOOM_ASSIGN_OR_RETURN(g1, b.Emit1("test.scale", {g1}, Attrs{{"s", 2.0}}));
      }
      if (g0 == GradBuilder::kNone) return std::vector<V>{g1};
      if (g1 == GradBuilder::kNone) return std::vector<V>{g0};
      LOOM_ASSIGN_OR_RETURN(V s, b.Emit1("test.add", {g0, g1}));
      return std::vector<V>{s};
    };
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.name = "test.fill";
    d.num_inputs = 0;
    d.infer = [](absl::Span<const TensorMeta>, const Attrs& at) -> absl::StatusOr<std::vector<TensorMeta>> {
      LOOM_ASSIGN_OR_RETURN(DType dt, ParseDType(at.GetString("dtype", "f32")));
      return std::vector<TensorMeta>{{dt, AttrShape(at)}};
    };
    d.reference = [](absl::Span<const Tensor>, absl::Span<Tensor> out, const Attrs& at) {
      out[0].Fill(at.GetFloat("value"));
      return absl::OkStatus();
    };
    d.kernels[DeviceKind::kCPU] = d.reference;
    d.no_grad_reason = "constant";
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.name = "test.grad_norm";
    d.num_inputs = -1;
    d.infer = [](absl::Span<const TensorMeta>, const Attrs&) -> absl::StatusOr<std::vector<TensorMeta>> {
      return std::vector<TensorMeta>{{DType::kF32, {}}};
    };
    d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
      double s = 0;
      for (const Tensor& t : in)
        for (int64_t i = 0; i < t.numel(); ++i) s += t.GetDouble(i) * t.GetDouble(i);
      out[0].SetDouble(0, std::sqrt(s));
      return absl::OkStatus();
    };
    d.kernels[DeviceKind::kCPU] = d.reference;
    d.no_grad_reason = "optimizer";
    defs.push_back(std::move(d));
  }
  {
    OpDef d;
    d.name = "test.adamw";
    d.num_inputs = 7;
    d.num_outputs = 3;
    d.infer = [](absl::Span<const TensorMeta> in, const Attrs&) -> absl::StatusOr<std::vector<TensorMeta>> {
      for (int i = 1; i < 4; ++i)
        if (!(in[i] == in[0])) return absl::InvalidArgumentError(absl::StrCat("test.adamw: input ", i, " differs"));
      return std::vector<TensorMeta>{in[0], in[0], in[0]};
    };
    d.reference = [](absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs& at) {
      double b1 = at.GetFloat("beta1", 0.9), b2 = at.GetFloat("beta2", 0.999), eps = at.GetFloat("eps", 1e-8);
      double wd = at.GetFloat("weight_decay"), max_norm = at.GetFloat("max_norm");
      double gn = in[4].GetDouble(0), lr = in[5].GetDouble(0), step = in[6].GetDouble(0);
      double clip = max_norm > 0 ? std::min(1.0, max_norm / (gn + 1e-6)) : 1.0;
      Tensor p = out[0], m = out[1], v = out[2];
      for (int64_t i = 0; i < in[0].numel(); ++i) {
        double g = in[1].GetDouble(i) * clip;
        double mi = b1 * in[2].GetDouble(i) + (1 - b1) * g;
        double vi = b2 * in[3].GetDouble(i) + (1 - b2) * g * g;
        double mh = mi / (1 - std::pow(b1, step)), vh = vi / (1 - std::pow(b2, step));
        double pi = in[0].GetDouble(i);
        pi -= lr * (mh / (std::sqrt(vh) + eps) + wd * pi);
        p.SetDouble(i, pi);
        m.SetDouble(i, mi);
        v.SetDouble(i, vi);
      }
      return absl::OkStatus();
    };
    d.kernels[DeviceKind::kCPU] = d.reference;
    d.no_grad_reason = "optimizer";
    defs.push_back(std::move(d));
  }
  return defs;
}

struct Registrar {
  Registrar() {
    for (OpDef& d : MakeOps()) {
      if (kernels::OpRegistry::Global().Find(d.name) == nullptr) {
        absl::Status s = kernels::OpRegistry::Global().Register(std::move(d));
        if (!s.ok()) abort();
      }
    }
  }
};
Registrar registrar;

}  // namespace

void RegisterTestOps() {}

}  // namespace loom::compiler::testing
