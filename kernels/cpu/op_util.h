// Glue shared by the tensor-op registration files (register_*.cc): short
// names for grad-rule plumbing and consistency-case construction.
//
//   V g = ...;                                   // a GradBuilder value
//   LOOM_ASSIGN_OR_RETURN(V ga, SumToShape(b, g, b.Meta(ctx.inputs[0]).shape));
//   def.cases.push_back(Case("bcast", {Spec({3, 5, 7}), Spec({5, 1})}));
#pragma once

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::cpu::internal {

using kernels::Attrs;
using kernels::GradBuilder;
using kernels::GradContext;
using kernels::OpDef;
using kernels::TensorMeta;
using V = GradBuilder::Value;
using GradResult = absl::StatusOr<std::vector<V>>;
using InferResult = absl::StatusOr<std::vector<TensorMeta>>;

inline std::vector<int64_t> ToVec(absl::Span<const int64_t> s) { return std::vector<int64_t>(s.begin(), s.end()); }

// sum_to(g, shape), or g itself when it already has that shape.
inline absl::StatusOr<V> SumToShape(GradBuilder& b, V g, absl::Span<const int64_t> shape) {
  if (absl::Span<const int64_t>(b.Meta(g).shape) == shape) return g;
  return b.Emit1("sum_to", {g}, Attrs{{"shape", ToVec(shape)}});
}

// An f32 input of `shape` drawn uniformly from [lo, hi).
inline kernels::InputSpec Spec(std::vector<int64_t> shape, double lo = -1.0, double hi = 1.0) {
  kernels::InputSpec s;
  s.meta = TensorMeta{DType::kF32, Shape(shape.begin(), shape.end())};
  s.lo = lo;
  s.hi = hi;
  return s;
}

// An input of `dtype` (i32, i64 or bool) with values in [lo, hi) (bool: 0 or
// 1); integer inputs take no gradient.
inline kernels::InputSpec TypedSpec(std::vector<int64_t> shape, DType dtype, double lo = -8, double hi = 8) {
  kernels::InputSpec s = Spec(std::move(shape), lo, hi);
  s.meta.dtype = dtype;
  s.differentiable = false;
  return s;
}

// An f32 input holding whole numbers in [lo, hi): exact in every floating
// dtype, so results that depend on ties or on exact values (comparisons,
// float -> int casts) agree across dtypes.
inline kernels::InputSpec WholeSpec(std::vector<int64_t> shape, double lo = -3, double hi = 3) {
  kernels::InputSpec s = Spec(std::move(shape), lo, hi);
  s.differentiable = false;
  s.fill = [lo, hi](Tensor& t, const Philox& rng) {
    for (int64_t e = 0; e < t.numel(); ++e) t.SetDouble(e, std::floor(lo + (hi - lo) * rng.Uniform(e)));
  };
  return s;
}

inline kernels::ConsistencyCase Case(std::string name, std::vector<kernels::InputSpec> inputs, Attrs attrs = {}) {
  kernels::ConsistencyCase c;
  c.name = std::move(name);
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  return c;
}

// Every CPU kernel in this package takes these dtypes unless it says otherwise.
inline std::map<DeviceKind, std::vector<DType>> CpuDTypes(std::vector<DType> d) {
  return {{DeviceKind::kCPU, std::move(d)}};
}

}  // namespace loom::kernels::cpu::internal
