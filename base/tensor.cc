#include "base/tensor.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/thread_pool.h"

namespace loom {
namespace {

// One element through double, as GetDouble and SetDouble convert it.
template <typename S>
double AsDouble(S x) {
  if constexpr (std::is_same_v<S, BF16> || std::is_same_v<S, F16>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}
template <typename D>
D FromDouble(double v) {
  if constexpr (std::is_same_v<D, BF16> || std::is_same_v<D, F16>) {
    return D(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

// Element loops over contiguous host buffers are split over the global
// thread pool in pieces of at least this many elements (bytes for memset).
constexpr int64_t kParallelGrain = int64_t{1} << 18;

// dst[i] = src[i] converted, for n contiguous elements: the values that
// SetDouble(i, GetDouble(i)) gives, without the per-element dispatch.
void ConvertContiguous(const void* src, DType sdt, void* dst, DType ddt, int64_t n) {
  VisitDType(sdt, [&](auto stag) {
    using S = decltype(stag);
    VisitDType(ddt, [&](auto dtag) {
      using D = decltype(dtag);
      const S* s = static_cast<const S*>(src);
      D* d = static_cast<D*>(dst);
      ThreadPool::Global().ParallelFor(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) d[i] = FromDouble<D>(AsDouble(s[i]));
      });
    });
  });
}

}  // namespace

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides ContiguousStrides(absl::Span<const int64_t> shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Storage::Storage(Allocator* alloc, size_t bytes)
    : alloc_(alloc), data_(alloc->Allocate(bytes)), bytes_(bytes), device_(alloc->device()) {}
Storage::Storage(void* external, size_t bytes, Device device)
    : alloc_(nullptr), data_(external), bytes_(bytes), device_(device) {}
Storage::~Storage() {
  if (alloc_ != nullptr && data_ != nullptr) alloc_->Deallocate(data_, bytes_);
}

Tensor::Tensor(std::shared_ptr<Storage> s, Shape shape, Strides strides, int64_t offset, DType dtype)
    : storage_(std::move(s)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(NumElements(shape_)),
      dtype_(dtype),
      defined_(true) {
  if (storage_) device_ = storage_->device();
}

absl::StatusOr<Tensor> Tensor::Empty(absl::Span<const int64_t> shape, DType dtype, Device device,
                                     Allocator* alloc) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("negative size ", shape[i], " at dim ", i, " of shape ", ShapeToString(shape)));
  }
  if (alloc == nullptr) {
    if (!device.is_cpu())
      return absl::FailedPreconditionError(
          absl::StrCat("no allocator registered for device ", device.ToString()));
    alloc = DefaultCpuAllocator();
  }
  if (alloc->device() != device)
    return absl::InvalidArgumentError(absl::StrCat("allocator is for ", alloc->device().ToString(),
                                                   ", tensor wants ", device.ToString()));
  Shape sh(shape.begin(), shape.end());
  size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  auto storage = std::make_shared<Storage>(alloc, bytes);
  Tensor t(std::move(storage), sh, ContiguousStrides(shape), 0, dtype);
  t.device_ = device;
  return t;
}

Tensor Tensor::MustEmpty(absl::Span<const int64_t> shape, DType dtype) {
  auto t = Empty(shape, dtype);
  if (!t.ok()) {
    fprintf(stderr, "loom: Tensor::MustEmpty: %s\n", std::string(t.status().message()).c_str());
    abort();
  }
  return *std::move(t);
}

Tensor Tensor::Zeros(absl::Span<const int64_t> shape, DType dtype) {
  Tensor t = MustEmpty(shape, dtype);
  char* p = static_cast<char*>(t.raw_data());
  ThreadPool::Global().ParallelFor(static_cast<int64_t>(t.nbytes()), 16 * kParallelGrain,
                                   [p](int64_t lo, int64_t hi) { std::memset(p + lo, 0, hi - lo); });
  return t;
}

Tensor Tensor::FromVector(absl::Span<const int64_t> shape, const std::vector<double>& values,
                          DType dtype) {
  Tensor t = MustEmpty(shape, dtype);
  if (static_cast<int64_t>(values.size()) != t.numel()) {
    fprintf(stderr, "loom: Tensor::FromVector: %zu values for shape %s\n", values.size(),
            ShapeToString(shape).c_str());
    abort();
  }
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, values[i]);
  return t;
}

Tensor Tensor::Wrap(void* data, absl::Span<const int64_t> shape, DType dtype, Device device) {
  size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  auto storage = std::make_shared<Storage>(data, bytes, device);
  return Tensor(std::move(storage), Shape(shape.begin(), shape.end()), ContiguousStrides(shape), 0,
                dtype);
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeToString(shape_), " ", device().ToString());
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(DTypeSize(dtype_));
}

Tensor Tensor::Transpose(int d0, int d1) const {
  if (d0 < 0) d0 += ndim();
  if (d1 < 0) d1 += ndim();
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::Permute(absl::Span<const int> dims) const {
  Tensor t = *this;
  for (size_t i = 0; i < dims.size(); ++i) {
    t.shape_[i] = shape_[dims[i]];
    t.strides_[i] = strides_[dims[i]];
  }
  return t;
}

Tensor Tensor::Narrow(int dim, int64_t start, int64_t length) const {
  if (dim < 0) dim += ndim();
  Tensor t = *this;
  t.offset_ += start * strides_[dim];
  t.shape_[dim] = length;
  t.numel_ = NumElements(t.shape_);
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshape(absl::Span<const int64_t> shape) const {
  Shape sh(shape.begin(), shape.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < sh.size(); ++i) {
    if (sh[i] == -1) {
      if (infer >= 0) return absl::InvalidArgumentError("reshape: more than one -1 in the shape");
      infer = static_cast<int>(i);
    } else {
      known *= sh[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel_ % known != 0)
      return absl::InvalidArgumentError(absl::StrCat("reshape: cannot infer -1 for ", numel_,
                                                     " elements into ", ShapeToString(shape)));
    sh[infer] = numel_ / known;
  }
  if (NumElements(sh) != numel_)
    return absl::InvalidArgumentError(absl::StrCat("reshape: ", ShapeToString(shape_), " has ", numel_,
                                                   " elements, not ", NumElements(sh)));
  if (!is_contiguous())
    return absl::InvalidArgumentError("reshape: tensor is not contiguous; call Contiguous() first");
  Tensor t = *this;
  t.shape_ = sh;
  t.strides_ = ContiguousStrides(sh);
  return t;
}

absl::StatusOr<Tensor> Tensor::Expand(absl::Span<const int64_t> shape) const {
  if (shape.size() < shape_.size())
    return absl::InvalidArgumentError(absl::StrCat("expand: cannot expand ", ShapeToString(shape_),
                                                   " to fewer dims ", ShapeToString(shape)));
  Tensor t = *this;
  size_t lead = shape.size() - shape_.size();
  t.shape_ = Shape(shape.begin(), shape.end());
  t.strides_ = Strides(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    int64_t want = shape[lead + i];
    if (shape_[i] == want) {
      t.strides_[lead + i] = strides_[i];
    } else if (shape_[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("expand: dim ", i, " of ", ShapeToString(shape_),
                                                     " cannot broadcast to ", ShapeToString(shape)));
    }
  }
  t.numel_ = NumElements(t.shape_);
  return t;
}

int64_t Tensor::ElementOffset(int64_t linear) const {
  int64_t off = 0;
  for (int i = ndim() - 1; i >= 0; --i) {
    int64_t idx = linear % shape_[i];
    linear /= shape_[i];
    off += idx * strides_[i];
  }
  return off;
}

double Tensor::GetDouble(int64_t i) const {
  const char* base = static_cast<const char*>(raw_data());
  int64_t off = ElementOffset(i);
  return VisitDType(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>) {
      return static_cast<double>(static_cast<float>(reinterpret_cast<const T*>(base)[off]));
    } else {
      return static_cast<double>(reinterpret_cast<const T*>(base)[off]);
    }
  });
}

void Tensor::SetDouble(int64_t i, double v) {
  char* base = static_cast<char*>(raw_data());
  int64_t off = ElementOffset(i);
  VisitDType(dtype_, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>) {
      reinterpret_cast<T*>(base)[off] = T(static_cast<float>(v));
    } else {
      reinterpret_cast<T*>(base)[off] = static_cast<T>(v);
    }
  });
}

std::vector<double> Tensor::ToVector() const {
  std::vector<double> v(numel_);
  for (int64_t i = 0; i < numel_; ++i) v[i] = GetDouble(i);
  return v;
}

Tensor Tensor::Contiguous() const {
  if (is_contiguous()) return *this;
  return Clone();
}

Tensor Tensor::Clone() const {
  Tensor t = MustEmpty(shape_, dtype_);
  absl::Status s = t.CopyFrom(*this);
  (void)s;
  return t;
}

Tensor Tensor::To(DType dtype) const {
  if (dtype == dtype_ && is_contiguous()) return *this;
  Tensor t = MustEmpty(shape_, dtype);
  absl::Status s = t.CopyFrom(*this);
  (void)s;
  return t;
}

absl::Status Tensor::CopyFrom(const Tensor& src) {
  if (src.shape_ != shape_)
    return absl::InvalidArgumentError(absl::StrCat("copy: source shape ", ShapeToString(src.shape_),
                                                   " != destination shape ", ShapeToString(shape_)));
  if (!device().is_cpu() || !src.device().is_cpu())
    return absl::UnimplementedError("copy: Tensor::CopyFrom handles host tensors only");
  if (src.dtype_ == dtype_ && is_contiguous() && src.is_contiguous()) {
    if (nbytes() > 0) std::memmove(raw_data(), src.raw_data(), nbytes());
    return absl::OkStatus();
  }
  if (is_contiguous() && src.is_contiguous()) {
    ConvertContiguous(src.raw_data(), src.dtype_, raw_data(), dtype_, numel_);
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < numel_; ++i) SetDouble(i, src.GetDouble(i));
  return absl::OkStatus();
}

void Tensor::Fill(double value) {
  for (int64_t i = 0; i < numel_; ++i) SetDouble(i, value);
}

double RelativeError(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  int64_t n = std::min(a.numel(), b.numel());
  for (int64_t i = 0; i < n; ++i) {
    double x = a.GetDouble(i), y = b.GetDouble(i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  if (a.numel() != b.numel()) return INFINITY;
  if (std::isnan(num)) return NAN;
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

}  // namespace loom
