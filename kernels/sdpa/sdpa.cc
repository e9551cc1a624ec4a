// Parameter validation, implementation selection and the typed entry points.
#include "kernels/sdpa/sdpa.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/sdpa/sdpa_internal.h"

namespace loom::kernels::sdpa {

namespace {
constexpr int64_t kFlashMaxHeadDim = 256;
constexpr int64_t kSmallProblem = 4096;  // T*S at or below this: memeff (bench: T=16..64)

absl::Status Bad(absl::string_view what, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}
}  // namespace

absl::string_view SdpaImplName(SdpaImpl impl) {
  switch (impl) {
    case SdpaImpl::kFlash: return "flash";
    case SdpaImpl::kMemEff: return "memeff";
    case SdpaImpl::kMath: return "math";
  }
  return "?";
}

std::string SdpaSelection::ToString() const {
  return absl::StrCat("sdpa: picked ", SdpaImplName(impl), " because ", reason);
}

absl::StatusOr<SdpaParams> MakeSdpaParams(absl::Span<const kernels::TensorMeta> in, const kernels::Attrs& attrs) {
  if (in.size() != 3 && in.size() != 4)
    return Bad("inputs", absl::StrCat("expected q, k, v and an optional mask (3 or 4 inputs), got ", in.size()));
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    if (in[i].shape.size() != 4)
      return Bad(names[i], absl::StrCat("expected 4 dims [B, H, T, D], got ", in[i].shape.size(), " (",
                                        in[i].ToString(), ")"));
  }
  const kernels::TensorMeta &q = in[0], &k = in[1], &v = in[2];
  if (q.dtype != DType::kF32 && q.dtype != DType::kF64)
    return Bad("q", absl::StrCat("dtype ", DTypeName(q.dtype), " not supported (f32, f64)"));
  if (k.dtype != q.dtype) return Bad("k", absl::StrCat("dtype ", DTypeName(k.dtype), " != q dtype ", DTypeName(q.dtype)));
  if (v.dtype != q.dtype) return Bad("v", absl::StrCat("dtype ", DTypeName(v.dtype), " != q dtype ", DTypeName(q.dtype)));
  SdpaParams p;
  p.dtype = q.dtype;
  p.B = q.shape[0];
  p.H = q.shape[1];
  p.T = q.shape[2];
  p.D = q.shape[3];
  p.Hkv = k.shape[1];
  p.S = k.shape[2];
  p.Dv = v.shape[3];
  if (k.shape[0] != p.B) return Bad("k", absl::StrCat("batch ", k.shape[0], " != q batch ", p.B));
  if (v.shape[0] != p.B) return Bad("v", absl::StrCat("batch ", v.shape[0], " != q batch ", p.B));
  if (v.shape[1] != p.Hkv) return Bad("v", absl::StrCat("heads ", v.shape[1], " != k heads ", p.Hkv));
  if (p.Hkv <= 0 || p.H % p.Hkv != 0)
    return Bad("k", absl::StrCat("q heads H=", p.H, " is not a multiple of k heads Hkv=", p.Hkv));
  if (k.shape[3] != p.D) return Bad("k", absl::StrCat("head dim ", k.shape[3], " != q head dim ", p.D));
  if (v.shape[2] != p.S) return Bad("v", absl::StrCat("length ", v.shape[2], " != k length ", p.S));
  if (in.size() == 4) {
    const kernels::TensorMeta& m = in[3];
    if (m.dtype == DType::kBool) p.mask_kind = MaskKind::kBool;
    else if (m.dtype == DType::kF32 || m.dtype == DType::kF64) p.mask_kind = MaskKind::kAdditive;
    else return Bad("mask", absl::StrCat("dtype ", DTypeName(m.dtype), " not supported (bool, f32, f64)"));
    const int64_t target[4] = {p.B, p.H, p.T, p.S};
    bool ok = m.shape.size() <= 4;
    for (size_t i = 0; ok && i < m.shape.size(); ++i) {
      int64_t want = target[4 - m.shape.size() + i];
      if (m.shape[i] != want && m.shape[i] != 1) ok = false;
    }
    if (!ok)
      return Bad("mask", absl::StrCat("shape ", ShapeToString(m.shape), " is not broadcastable to [B, H, T, S] = ",
                                      ShapeToString(target)));
    p.mask_shape = m.shape;
  }
  p.is_causal = attrs.GetBool("is_causal", false);
  p.scale = attrs.Has("scale") ? attrs.GetFloat("scale", 0.0) : 1.0 / std::sqrt(static_cast<double>(p.D > 0 ? p.D : 1));
  if (!std::isfinite(p.scale)) return Bad("scale", absl::StrCat("must be finite, got ", p.scale));
  p.dropout_p = attrs.GetFloat("dropout_p", 0.0);
  if (!(p.dropout_p >= 0.0 && p.dropout_p < 1.0))
    return Bad("dropout_p", absl::StrCat("must be in [0, 1), got ", p.dropout_p));
  p.seed = static_cast<uint64_t>(attrs.GetInt("seed", 0));
  p.impl = attrs.GetString("impl", "auto");
  if (p.impl != "auto" && p.impl != "flash" && p.impl != "memeff" && p.impl != "math")
    return Bad("impl", absl::StrCat("unknown implementation '", p.impl, "' (auto, flash, memeff, math)"));
  return p;
}

absl::Status CanRun(SdpaImpl impl, const SdpaParams& p) {
  if (!p.device.is_cpu())
    return Bad("impl", absl::StrCat(SdpaImplName(impl), " cannot run on ", p.device.ToString(),
                                    ": flash, memeff and math are cpu implementations"));
  if (impl == SdpaImpl::kFlash) {
    if (p.mask_kind != MaskKind::kNone)
      return Bad("impl", "flash cannot run: flash takes no mask tensor (only is_causal); use impl=memeff or math");
    if (p.D > kFlashMaxHeadDim || p.Dv > kFlashMaxHeadDim)
      return Bad("impl", absl::StrCat("flash cannot run: head dims D=", p.D, ", Dv=", p.Dv,
                                      " exceed the flash limit ", kFlashMaxHeadDim, "; use impl=memeff or math"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SdpaSelection> SelectSdpaImpl(const SdpaParams& p) {
  SdpaSelection sel;
  if (p.impl != "auto") {
    SdpaImpl want = p.impl == "flash" ? SdpaImpl::kFlash : p.impl == "memeff" ? SdpaImpl::kMemEff : SdpaImpl::kMath;
    LOOM_RETURN_IF_ERROR(CanRun(want, p));
    sel.impl = want;
    sel.reason = absl::StrCat("impl=", p.impl, " was requested");
    return sel;
  }
  if (!p.device.is_cpu())
    return absl::UnimplementedError(absl::StrCat("sdpa: no implementation for device ", p.device.ToString()));
  if (p.dtype == DType::kF64) {
    sel.impl = SdpaImpl::kMath;
    sel.reason = "dtype f64 runs the reference (flash and memeff are tuned for f32)";
  } else if (p.T * p.S <= kSmallProblem) {
    sel.impl = SdpaImpl::kMemEff;
    sel.reason = absl::StrCat("the problem is small (T*S=", p.T * p.S, " <= ", kSmallProblem,
                              "): memeff's single row-block pass has the least overhead");
  } else if (p.mask_kind != MaskKind::kNone) {
    sel.impl = SdpaImpl::kMemEff;
    sel.reason = absl::StrCat(p.mask_kind == MaskKind::kBool ? "a bool" : "an additive",
                              " mask tensor is given (flash takes none): memeff handles any mask in O(S) memory per row");
  } else if (p.D > kFlashMaxHeadDim || p.Dv > kFlashMaxHeadDim) {
    sel.impl = SdpaImpl::kMemEff;
    sel.reason = absl::StrCat("head dim D=", p.D, "/Dv=", p.Dv, " exceeds the flash limit ", kFlashMaxHeadDim);
  } else {
    sel.impl = SdpaImpl::kFlash;
    sel.reason = absl::StrCat("f32 without a mask tensor: tiled online softmax in O(T+S) memory",
                              p.is_causal ? ", skipping fully masked causal tiles" : "",
                              p.dropout_p > 0 ? ", with Philox dropout regenerated per tile" : "");
  }
  return sel;
}

namespace {

absl::Status CheckTensor(const Tensor& t, absl::string_view name, DType dtype, std::initializer_list<int64_t> shape) {
  if (!t.defined()) return Bad(name, "undefined tensor");
  if (!t.device().is_cpu()) return Bad(name, absl::StrCat("must be on cpu, is on ", t.device().ToString()));
  if (t.dtype() != dtype)
    return Bad(name, absl::StrCat("dtype ", DTypeName(t.dtype()), " != expected ", DTypeName(dtype)));
  Shape want(shape.begin(), shape.end());
  if (t.shape() != want)
    return Bad(name, absl::StrCat("shape ", ShapeToString(t.shape()), " != expected ", ShapeToString(want)));
  return absl::OkStatus();
}

// Runs `fn` writing into `dst`'s storage directly when contiguous, else through a
// temporary copied back.
template <typename Fn>
absl::Status WithContiguousOut(Tensor& dst, Fn&& fn) {
  if (dst.is_contiguous()) return fn(dst);
  Tensor tmp = Tensor::MustEmpty(dst.shape(), dst.dtype());
  LOOM_RETURN_IF_ERROR(fn(tmp));
  return dst.CopyFrom(tmp);
}

template <typename T>
void RunForward(SdpaImpl impl, const internal::FwdArgs<T>& a) {
  switch (impl) {
    case SdpaImpl::kFlash: internal::FlashForward<T>(a); break;
    case SdpaImpl::kMemEff: internal::MemEffForward<T>(a); break;
    case SdpaImpl::kMath: internal::MathForward<T>(a); break;
  }
}

}  // namespace

absl::Status SdpaForward(SdpaImpl impl, const SdpaParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor* mask, Tensor& out, Tensor& lse) {
  LOOM_RETURN_IF_ERROR(CanRun(impl, p));
  LOOM_RETURN_IF_ERROR(CheckTensor(q, "q", p.dtype, {p.B, p.H, p.T, p.D}));
  LOOM_RETURN_IF_ERROR(CheckTensor(k, "k", p.dtype, {p.B, p.Hkv, p.S, p.D}));
  LOOM_RETURN_IF_ERROR(CheckTensor(v, "v", p.dtype, {p.B, p.Hkv, p.S, p.Dv}));
  LOOM_RETURN_IF_ERROR(CheckTensor(out, "out", p.dtype, {p.B, p.H, p.T, p.Dv}));
  LOOM_RETURN_IF_ERROR(CheckTensor(lse, "lse", DType::kF32, {p.B, p.H, p.T}));
  Tensor qc = q.Contiguous(), kc = k.Contiguous(), vc = v.Contiguous(), mask_keep;
  internal::MaskView mv = internal::MakeMaskView(p, mask, &mask_keep);
  return WithContiguousOut(out, [&](Tensor& o) {
    return WithContiguousOut(lse, [&](Tensor& l) -> absl::Status {
      return VisitDType(p.dtype, [&](auto tag) -> absl::Status {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          Tensor lse_t = std::is_same_v<T, float> ? l : Tensor::MustEmpty({p.B, p.H, p.T}, p.dtype);
          internal::FwdArgs<T> a{&p, qc.data<T>(), kc.data<T>(), vc.data<T>(), mv, o.data<T>(), lse_t.data<T>()};
          RunForward<T>(impl, a);
          if (!std::is_same_v<T, float>) LOOM_RETURN_IF_ERROR(l.CopyFrom(lse_t));
          return absl::OkStatus();
        } else {
          return Bad("q", "unsupported dtype");
        }
      });
    });
  });
}

absl::Status SdpaBackward(SdpaImpl impl, const SdpaParams& p, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor* mask, Tensor& dq,
                          Tensor& dk, Tensor& dv) {
  LOOM_RETURN_IF_ERROR(CanRun(impl, p));
  LOOM_RETURN_IF_ERROR(CheckTensor(dout, "dout", p.dtype, {p.B, p.H, p.T, p.Dv}));
  LOOM_RETURN_IF_ERROR(CheckTensor(q, "q", p.dtype, {p.B, p.H, p.T, p.D}));
  LOOM_RETURN_IF_ERROR(CheckTensor(k, "k", p.dtype, {p.B, p.Hkv, p.S, p.D}));
  LOOM_RETURN_IF_ERROR(CheckTensor(v, "v", p.dtype, {p.B, p.Hkv, p.S, p.Dv}));
  LOOM_RETURN_IF_ERROR(CheckTensor(out, "out", p.dtype, {p.B, p.H, p.T, p.Dv}));
  LOOM_RETURN_IF_ERROR(CheckTensor(lse, "lse", DType::kF32, {p.B, p.H, p.T}));
  LOOM_RETURN_IF_ERROR(CheckTensor(dq, "dq", p.dtype, {p.B, p.H, p.T, p.D}));
  LOOM_RETURN_IF_ERROR(CheckTensor(dk, "dk", p.dtype, {p.B, p.Hkv, p.S, p.D}));
  LOOM_RETURN_IF_ERROR(CheckTensor(dv, "dv", p.dtype, {p.B, p.Hkv, p.S, p.Dv}));
  Tensor qc = q.Contiguous(), kc = k.Contiguous(), vc = v.Contiguous(), dc = dout.Contiguous(),
         oc = out.Contiguous(), lc = lse.Contiguous(), mask_keep;
  internal::MaskView mv = internal::MakeMaskView(p, mask, &mask_keep);
  return WithContiguousOut(dq, [&](Tensor& gq) {
    return WithContiguousOut(dk, [&](Tensor& gk) {
      return WithContiguousOut(dv, [&](Tensor& gv) -> absl::Status {
        return VisitDType(p.dtype, [&](auto tag) -> absl::Status {
          using T = decltype(tag);
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            Tensor lse_t = lc;
            Tensor out_t = oc;
            if (!std::is_same_v<T, float> && impl != SdpaImpl::kMath) {
              // The saved lse is f32; recompute it (and out) in f64 so the f64
              // backward is exact to f64 rounding.
              lse_t = Tensor::MustEmpty({p.B, p.H, p.T}, p.dtype);
              out_t = Tensor::MustEmpty({p.B, p.H, p.T, p.Dv}, p.dtype);
              internal::FwdArgs<T> fa{&p, qc.data<T>(), kc.data<T>(), vc.data<T>(), mv, out_t.data<T>(),
                                      lse_t.data<T>()};
              RunForward<T>(impl, fa);
            } else if (!std::is_same_v<T, float>) {
              lse_t = lc.To(p.dtype);  // math ignores it; keep the pointer valid
            }
            internal::BwdArgs<T> a{&p, dc.data<T>(), qc.data<T>(), kc.data<T>(), vc.data<T>(), out_t.data<T>(),
                                   lse_t.data<T>(), mv, gq.data<T>(), gk.data<T>(), gv.data<T>()};
            switch (impl) {
              case SdpaImpl::kFlash: internal::FlashBackward<T>(a); break;
              case SdpaImpl::kMemEff: internal::MemEffBackward<T>(a); break;
              case SdpaImpl::kMath: internal::MathBackward<T>(a); break;
            }
            return absl::OkStatus();
          } else {
            return Bad("q", "unsupported dtype");
          }
        });
      });
    });
  });
}

absl::StatusOr<std::vector<Tensor>> Sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                                         const kernels::Attrs& attrs, SdpaSelection* selection) {
  std::vector<kernels::TensorMeta> metas = {kernels::MetaOf(q), kernels::MetaOf(k), kernels::MetaOf(v)};
  if (mask != nullptr && mask->defined()) metas.push_back(kernels::MetaOf(*mask));
  LOOM_ASSIGN_OR_RETURN(SdpaParams p, MakeSdpaParams(metas, attrs));
  p.device = q.device();
  LOOM_ASSIGN_OR_RETURN(SdpaSelection sel, SelectSdpaImpl(p));
  if (selection != nullptr) *selection = sel;
  Tensor out = Tensor::MustEmpty({p.B, p.H, p.T, p.Dv}, p.dtype);
  Tensor lse = Tensor::MustEmpty({p.B, p.H, p.T}, DType::kF32);
  LOOM_RETURN_IF_ERROR(SdpaForward(sel.impl, p, q, k, v, mask, out, lse));
  return std::vector<Tensor>{out, lse};
}

absl::StatusOr<std::vector<Tensor>> SdpaGrad(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& lse, const Tensor* mask,
                                             const kernels::Attrs& attrs, SdpaSelection* selection) {
  std::vector<kernels::TensorMeta> metas = {kernels::MetaOf(q), kernels::MetaOf(k), kernels::MetaOf(v)};
  if (mask != nullptr && mask->defined()) metas.push_back(kernels::MetaOf(*mask));
  LOOM_ASSIGN_OR_RETURN(SdpaParams p, MakeSdpaParams(metas, attrs));
  p.device = q.device();
  LOOM_ASSIGN_OR_RETURN(SdpaSelection sel, SelectSdpaImpl(p));
  if (selection != nullptr) *selection = sel;
  Tensor dq = Tensor::MustEmpty({p.B, p.H, p.T, p.D}, p.dtype);
  Tensor dk = Tensor::MustEmpty({p.B, p.Hkv, p.S, p.D}, p.dtype);
  Tensor dv = Tensor::MustEmpty({p.B, p.Hkv, p.S, p.Dv}, p.dtype);
  LOOM_RETURN_IF_ERROR(SdpaBackward(sel.impl, p, dout, q, k, v, out, lse, mask, dq, dk, dv));
  return std::vector<Tensor>{dq, dk, dv};
}

}  // namespace loom::kernels::sdpa
