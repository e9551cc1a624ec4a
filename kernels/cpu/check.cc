#include "kernels/cpu/check.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::kernels::cpu {

absl::Status ArgError(absl::string_view op, absl::string_view arg, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": ", msg));
}

absl::Status CheckCpu(absl::string_view op, absl::string_view arg, const Tensor& t) {
  if (!t.defined()) return ArgError(op, arg, "undefined tensor");
  if (!t.device().is_cpu())
    return ArgError(op, arg, absl::StrCat("expected a cpu tensor, got one on ", t.device().ToString()));
  return absl::OkStatus();
}

absl::Status CheckDType(absl::string_view op, absl::string_view arg, DType got,
                        absl::Span<const DType> allowed) {
  for (DType d : allowed)
    if (d == got) return absl::OkStatus();
  std::vector<std::string> names;
  for (DType d : allowed) names.emplace_back(DTypeName(d));
  return ArgError(op, arg, absl::StrCat("expected dtype ", absl::StrJoin(names, " or "), ", got ",
                                        DTypeName(got)));
}

absl::Status CheckDType(absl::string_view op, absl::string_view arg, DType got,
                        std::initializer_list<DType> allowed) {
  return CheckDType(op, arg, got, absl::Span<const DType>(allowed.begin(), allowed.size()));
}

absl::Status CheckFloating(absl::string_view op, absl::string_view arg, DType got) {
  if (IsFloating(got)) return absl::OkStatus();
  return ArgError(op, arg, absl::StrCat("expected a floating dtype, got ", DTypeName(got)));
}

absl::Status CheckSameDType(absl::string_view op, absl::string_view arg_a, DType a,
                            absl::string_view arg_b, DType b) {
  if (a == b) return absl::OkStatus();
  return ArgError(op, arg_b, absl::StrCat("dtype ", DTypeName(b), " does not match ", arg_a, ": ",
                                          DTypeName(a)));
}

absl::Status CheckRank(absl::string_view op, absl::string_view arg, absl::Span<const int64_t> shape,
                       int min_rank, int max_rank) {
  int r = static_cast<int>(shape.size());
  if (r >= min_rank && (max_rank < 0 || r <= max_rank)) return absl::OkStatus();
  std::string want;
  if (max_rank < 0) want = absl::StrCat("at least ", min_rank);
  else if (min_rank == max_rank) want = absl::StrCat(min_rank);
  else want = absl::StrCat(min_rank, " to ", max_rank);
  return ArgError(op, arg, absl::StrCat("expected ", want, " dims, got ", r, " (shape ",
                                        ShapeToString(shape), ")"));
}

absl::Status CheckSameShape(absl::string_view op, absl::string_view arg_a, absl::Span<const int64_t> a,
                            absl::string_view arg_b, absl::Span<const int64_t> b) {
  if (a == b) return absl::OkStatus();
  return ArgError(op, arg_b, absl::StrCat("shape ", ShapeToString(b), " does not match ", arg_a, ": ",
                                          ShapeToString(a)));
}

absl::Status CheckShapeAttr(absl::string_view op, absl::string_view attr, absl::Span<const int64_t> shape) {
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < 0)
      return ArgError(op, attr, absl::StrCat("negative size ", shape[i], " at dim ", i, " of ",
                                             ShapeToString(shape)));
  return absl::OkStatus();
}

absl::StatusOr<Shape> BroadcastShapes(absl::string_view op, absl::string_view arg_a,
                                      absl::Span<const int64_t> a, absl::string_view arg_b,
                                      absl::Span<const int64_t> b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right.
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", arg_a, " ", ShapeToString(a), " and ", arg_b, " ", ShapeToString(b),
          " do not broadcast (dim ", static_cast<int64_t>(i) - static_cast<int64_t>(n), ": ", da, " vs ", db,
          ")"));
    }
  }
  return out;
}

absl::Status CheckBroadcastableTo(absl::string_view op, absl::string_view arg,
                                  absl::Span<const int64_t> from, absl::Span<const int64_t> to) {
  bool ok = from.size() <= to.size();
  for (size_t i = 0; ok && i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    ok = f == t || f == 1;
  }
  if (ok) return absl::OkStatus();
  return ArgError(op, arg, absl::StrCat("shape ", ShapeToString(from), " does not broadcast to ",
                                        ShapeToString(to)));
}

absl::StatusOr<int> NormalizeAxis(absl::string_view op, absl::string_view attr, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)
    return ArgError(op, attr, absl::StrCat("axis ", axis, " out of range for ", rank, " dims"));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

absl::StatusOr<std::vector<bool>> AxesMask(absl::string_view op, absl::string_view attr,
                                           absl::Span<const int64_t> axes, int rank) {
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t a : axes) {
    LOOM_ASSIGN_OR_RETURN(int d, NormalizeAxis(op, attr, a, rank));
    if (mask[d]) return ArgError(op, attr, absl::StrCat("axis ", a, " given twice"));
    mask[d] = true;
  }
  return mask;
}

absl::Status CheckOutput(absl::string_view op, absl::string_view arg, const Tensor& out, DType dtype,
                         absl::Span<const int64_t> shape) {
  LOOM_RETURN_IF_ERROR(CheckCpu(op, arg, out));
  if (out.dtype() != dtype)
    return ArgError(op, arg, absl::StrCat("expected dtype ", DTypeName(dtype), ", got ", DTypeName(out.dtype())));
  if (absl::Span<const int64_t>(out.shape()) != shape)
    return ArgError(op, arg, absl::StrCat("expected shape ", ShapeToString(shape), ", got ",
                                          ShapeToString(out.shape())));
  if (!out.is_contiguous()) return ArgError(op, arg, "output must be contiguous");
  return absl::OkStatus();
}

}  // namespace loom::kernels::cpu
