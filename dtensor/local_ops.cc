#include "dtensor/local_ops.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace loom::dtensor {
namespace {

// Copies the region dims [d, ndim) at byte pointers dst/src.
void CopyDims(char* dst, const char* src, const Tensor& dt, const Tensor& st, int d, size_t es) {
  const int nd = dt.ndim();
  const int64_t n = dt.dim(d);
  const int64_t ds = dt.stride(d) * static_cast<int64_t>(es);
  const int64_t ss = st.stride(d) * static_cast<int64_t>(es);
  if (d == nd - 1) {
    if (dt.stride(d) == 1 && st.stride(d) == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * es);
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * ds, src + i * ss, es);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) CopyDims(dst + i * ds, src + i * ss, dt, st, d + 1, es);
}

}  // namespace

absl::Status CopyRegion(const Tensor& dst, const Tensor& src) {
  if (dst.shape() != src.shape())
    return absl::InvalidArgumentError(absl::StrCat("copy_region: src: shape ", ShapeToString(src.shape()),
                                                   " != dst shape ", ShapeToString(dst.shape())));
  if (dst.dtype() != src.dtype())
    return absl::InvalidArgumentError(absl::StrCat("copy_region: src: dtype ", DTypeName(src.dtype()),
                                                   " != dst dtype ", DTypeName(dst.dtype())));
  if (!dst.device().is_cpu() || !src.device().is_cpu())
    return absl::InvalidArgumentError("copy_region: host tensors only");
  if (dst.numel() == 0) return absl::OkStatus();
  const size_t es = DTypeSize(dst.dtype());
  char* d = static_cast<char*>(dst.raw_data());
  const char* s = static_cast<const char*>(src.raw_data());
  if (dst.ndim() == 0) {
    std::memcpy(d, s, es);
    return absl::OkStatus();
  }
  if (dst.is_contiguous() && src.is_contiguous()) {
    std::memmove(d, s, dst.nbytes());
    return absl::OkStatus();
  }
  CopyDims(d, s, dst, src, 0, es);
  return absl::OkStatus();
}

Tensor SliceCopy(const Tensor& t, int dim, int64_t offset, int64_t length) {
  Tensor v = t.Narrow(dim, offset, length);
  Tensor out = Tensor::MustEmpty(v.shape(), v.dtype());
  absl::Status s = CopyRegion(out, v);
  (void)s;  // shapes and dtypes match by construction
  return out;
}

Tensor ZeroPad(const Tensor& src, absl::Span<const int64_t> shape) {
  Tensor out = Tensor::Zeros(shape, src.dtype());
  Tensor view = out;
  for (int d = 0; d < src.ndim(); ++d) view = view.Narrow(d, 0, src.dim(d));
  absl::Status s = CopyRegion(view, src);
  (void)s;
  return out;
}

void ScaleInPlace(const Tensor& t, int64_t num, int64_t den) {
  if (num == den || t.numel() == 0) return;
  VisitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return;
    } else {
      T* p = static_cast<T*>(t.raw_data());
      const int64_t n = t.numel();
      if constexpr (std::is_integral_v<T>) {
        for (int64_t i = 0; i < n; ++i)
          p[i] = static_cast<T>(static_cast<int64_t>(p[i]) * num / den);
      } else if constexpr (std::is_same_v<T, double>) {
        for (int64_t i = 0; i < n; ++i) p[i] = p[i] * static_cast<double>(num) / static_cast<double>(den);
      } else if constexpr (std::is_same_v<T, float>) {
        for (int64_t i = 0; i < n; ++i)
          p[i] = static_cast<float>(static_cast<double>(p[i]) * num / den);
      } else {  // bf16, f16: compute in double, round once
        for (int64_t i = 0; i < n; ++i)
          p[i] = T(static_cast<float>(static_cast<double>(static_cast<float>(p[i])) * num / den));
      }
    }
  });
}

}  // namespace loom::dtensor
