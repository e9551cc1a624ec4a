// Tensor: a strided view over reference-counted storage.
//
// A Tensor is (storage, element offset, shape, strides, dtype). Views
// (Transpose, Permute, Narrow, Reshape of contiguous data, Expand) share storage;
// Contiguous() and Clone() copy. Copying a Tensor object is cheap (it copies the
// view, not the bytes).
//
//   LOOM_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({4, 8}, DType::kF32));
//   float* p = x.data<float>();
//   Tensor xt = x.Transpose(0, 1);          // a view, strides {1, 8}
//   Tensor y = xt.Contiguous();             // a copy in row-major order
//
// Element access on the host: data<T>() checks the dtype and that the tensor is
// on the CPU. Kernels validate shapes, dtypes and devices at their API and return
// InvalidArgument naming the argument (see kernels/cpu/check.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/allocator.h"
#include "base/device.h"
#include "base/dtype.h"

namespace loom {

using Shape = absl::InlinedVector<int64_t, 6>;
using Strides = absl::InlinedVector<int64_t, 6>;

std::string ShapeToString(absl::Span<const int64_t> shape);  // "[2, 3]"
int64_t NumElements(absl::Span<const int64_t> shape);
Strides ContiguousStrides(absl::Span<const int64_t> shape);

class Storage {
 public:
  Storage(Allocator* alloc, size_t bytes);
  // Wraps memory Loom does not own (freed by nobody).
  Storage(void* external, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Allocator* alloc_;
  void* data_;
  size_t bytes_;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() is false

  // Uninitialised contiguous tensor. `alloc` null: the default allocator of `device`.
  static absl::StatusOr<Tensor> Empty(absl::Span<const int64_t> shape, DType dtype,
                                      Device device = Device::CPU(), Allocator* alloc = nullptr);
  // Like Empty but CHECK-fails on error; for code whose inputs are already valid.
  static Tensor MustEmpty(absl::Span<const int64_t> shape, DType dtype);
  static Tensor Zeros(absl::Span<const int64_t> shape, DType dtype);
  // Contiguous host tensor holding `values` (converted to `dtype`).
  static Tensor FromVector(absl::Span<const int64_t> shape, const std::vector<double>& values,
                           DType dtype = DType::kF32);
  // A tensor over memory Loom does not own (not freed).
  static Tensor Wrap(void* data, absl::Span<const int64_t> shape, DType dtype,
                     Device device = Device::CPU());

  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : device_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + ndim() : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + ndim() : i]; }
  int64_t numel() const { return numel_; }
  int64_t offset() const { return offset_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DTypeSize(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string DebugString() const;  // "f32[2, 3] cpu"

  void* raw_data() const;
  template <typename T>
  T* data() const;

  // ---- Views (share storage) ----
  Tensor Transpose(int d0, int d1) const;
  Tensor Permute(absl::Span<const int> dims) const;
  Tensor Narrow(int dim, int64_t start, int64_t length) const;
  // New shape with the same numel; one entry may be -1. Needs contiguous data.
  absl::StatusOr<Tensor> Reshape(absl::Span<const int64_t> shape) const;
  // Broadcast size-1 dims to `shape` with stride 0.
  absl::StatusOr<Tensor> Expand(absl::Span<const int64_t> shape) const;

  // ---- Copies ----
  Tensor Contiguous() const;  // self if already contiguous
  Tensor Clone() const;       // always a fresh contiguous copy
  Tensor To(DType dtype) const;  // converted contiguous copy (self if same dtype and contiguous)
  // Copies src into this tensor element-wise (shapes must match; dtype converts).
  absl::Status CopyFrom(const Tensor& src);
  void Fill(double value);

  // Element i in row-major logical order, as double (slow; tests and references).
  double GetDouble(int64_t i) const;
  void SetDouble(int64_t i, double v);
  std::vector<double> ToVector() const;

 private:
  Tensor(std::shared_ptr<Storage> s, Shape shape, Strides strides, int64_t offset, DType dtype);
  int64_t ElementOffset(int64_t linear) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  Device device_ = Device::CPU();
  bool defined_ = false;
};

template <typename T>
T* Tensor::data() const {
  if (DTypeOf<T>::value != dtype_) {
    fprintf(stderr, "loom: Tensor::data<%s>() on a %s tensor\n",
            std::string(DTypeName(DTypeOf<T>::value)).c_str(), std::string(DTypeName(dtype_)).c_str());
    abort();
  }
  return static_cast<T*>(raw_data());
}

// Relative error ||a - b|| / ||b|| over all elements (as double). 0 when both are 0.
double RelativeError(const Tensor& a, const Tensor& b);

}  // namespace loom
