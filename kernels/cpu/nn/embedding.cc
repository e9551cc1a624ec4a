// embedding and embedding_backward (see kernels/cpu/nn/nn_ops.h).
//
//   embedding(weight[V, C], ids[...] i32|i64) -> out[..., C], out[i] = weight[ids[i]]
//   embedding_backward(dy[..., C], ids[...]) attr num_embeddings (= V) -> dweight[V, C]
// An id outside [0, V) is InvalidArgument naming "ids", the id and its position.
// The backward is a deterministic scatter-add: ids are bucketed by value (a
// stable counting sort), then each weight row sums its dy rows in position
// order, so the result does not depend on the thread count.
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/cpu/nn/common.h"

namespace loom::kernels::cpu::nn::internal {
namespace {

absl::Status CheckIds(const std::vector<int64_t>& ids, int64_t v) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= v)
      return absl::InvalidArgumentError(
          absl::StrCat("ids: id ", ids[i], " at position ", i, " is outside [0, ", v, ")"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorMeta>> InferEmbedding(absl::Span<const TensorMeta> in, const Attrs&) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "weight"));
  LOOM_RETURN_IF_ERROR(ExpectRank(in[0], "weight", 2));
  LOOM_RETURN_IF_ERROR(ExpectInteger(in[1], "ids"));
  Shape out = in[1].shape;
  out.push_back(in[0].shape[1]);
  return std::vector<TensorMeta>{{in[0].dtype, out}};
}

absl::StatusOr<std::vector<TensorMeta>> InferEmbeddingBackward(absl::Span<const TensorMeta> in, const Attrs& a) {
  LOOM_RETURN_IF_ERROR(ExpectNumInputs(in, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in[0], "dy"));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in[0], "dy", 1));
  LOOM_RETURN_IF_ERROR(ExpectInteger(in[1], "ids"));
  Shape lead(in[0].shape.begin(), in[0].shape.end() - 1);
  if (in[1].shape != lead)
    return absl::InvalidArgumentError(absl::StrCat("ids: shape ", ShapeToString(in[1].shape),
                                                   " does not match dy without its last dim ", ShapeToString(lead)));
  LOOM_RETURN_IF_ERROR(CheckAttr(a, "num_embeddings", AttrKind::kInt));
  int64_t v = a.GetInt("num_embeddings", 0);
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat("num_embeddings: expected > 0, got ", v));
  return std::vector<TensorMeta>{{in[0].dtype, Shape{v, in[0].shape.back()}}};
}

absl::Status EmbeddingRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  Tensor w = AsF64(in[0]);
  std::vector<int64_t> ids = IdsOf(in[1]);
  int64_t v = w.dim(0), c = w.dim(1);
  LOOM_RETURN_IF_ERROR(CheckIds(ids, v));
  Tensor y = NewF64(out[0].shape());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < c; ++j) y.data<double>()[i * c + j] = w.data<double>()[ids[i] * c + j];
  return Store(out[0], y);
}

absl::Status EmbeddingBackwardRef(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  Tensor dy = AsF64(in[0]);
  std::vector<int64_t> ids = IdsOf(in[1]);
  int64_t v = out[0].dim(0), c = out[0].dim(1);
  LOOM_RETURN_IF_ERROR(CheckIds(ids, v));
  Tensor dw = NewF64(out[0].shape());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < c; ++j) dw.data<double>()[ids[i] * c + j] += dy.data<double>()[i * c + j];
  return Store(out[0], dw);
}

// Any dtype: rows are copied bytewise.
absl::Status EmbeddingKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  Tensor w = in[0].Contiguous();
  std::vector<int64_t> ids = IdsOf(in[1]);
  const int64_t v = w.dim(0);
  LOOM_RETURN_IF_ERROR(CheckIds(ids, v));
  const size_t row_bytes = static_cast<size_t>(w.dim(1)) * DTypeSize(w.dtype());
  const char* src = static_cast<const char*>(w.raw_data());
  char* dst = static_cast<char*>(out[0].raw_data());
  ParallelFor(static_cast<int64_t>(ids.size()), RowGrain(w.dim(1)), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) std::memcpy(dst + i * row_bytes, src + ids[i] * row_bytes, row_bytes);
  });
  return absl::OkStatus();
}

absl::Status EmbeddingBackwardKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out, const Attrs&) {
  const float* dy = in[0].data<float>();
  std::vector<int64_t> ids = IdsOf(in[1]);
  float* dw = out[0].data<float>();
  const int64_t v = out[0].dim(0), c = out[0].dim(1);
  LOOM_RETURN_IF_ERROR(CheckIds(ids, v));
  // Stable counting sort of positions by id.
  std::vector<int64_t> start(v + 1, 0), order(ids.size());
  for (int64_t id : ids) ++start[id + 1];
  for (int64_t k = 0; k < v; ++k) start[k + 1] += start[k];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < ids.size(); ++i) order[fill[ids[i]]++] = static_cast<int64_t>(i);
  ParallelFor(v, RowGrain(c), [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      float* row = dw + k * c;
      std::fill(row, row + c, 0.0f);
      for (int64_t p = start[k]; p < start[k + 1]; ++p) {
        const float* src = dy + order[p] * c;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) row[j] += src[j];
      }
    }
  });
  return absl::OkStatus();
}

kernels::InputSpec F(Shape s) {
  kernels::InputSpec spec;
  spec.meta = {DType::kF32, std::move(s)};
  return spec;
}
kernels::InputSpec Ids(Shape s, DType dt, int64_t v) {
  kernels::InputSpec spec;
  spec.meta = {dt, std::move(s)};
  spec.lo = 0;
  spec.hi = static_cast<double>(v);
  spec.differentiable = false;
  return spec;
}

kernels::OpDef MakeEmbedding() {
  kernels::OpDef d;
  d.name = "embedding";
  d.doc = "embedding(weight[V, C], ids[...] i32|i64) -> [..., C]";
  d.num_inputs = 2;
  d.infer = InferEmbedding;
  d.reference = EmbeddingRef;
  d.kernels[DeviceKind::kCPU] = EmbeddingKernel;
  d.kernel_dtypes[DeviceKind::kCPU] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF64};
  d.grad = [](kernels::GradBuilder& b, const kernels::GradContext& c) -> absl::StatusOr<std::vector<int>> {
    constexpr int kNone = kernels::GradBuilder::kNone;
    if (c.grad_outputs[0] == kNone) return std::vector<int>{kNone, kNone};
    int64_t v = b.Meta(c.inputs[0]).shape[0];
    LOOM_ASSIGN_OR_RETURN(int dw, b.Emit1("embedding_backward", {c.grad_outputs[0], c.inputs[1]},
                                          Attrs{{"num_embeddings", v}}));
    return std::vector<int>{dw, kNone};
  };
  d.cases.push_back({"V11_C5_ids3x7_i64", {F({11, 5}), Ids({3, 7}, DType::kI64, 11)}, Attrs{}});
  d.cases.push_back({"V4_C37_ids13_i32", {F({4, 37}), Ids({13}, DType::kI32, 4)}, Attrs{}});
  return d;
}

kernels::OpDef MakeEmbeddingBackward() {
  kernels::OpDef d;
  d.name = "embedding_backward";
  d.doc = "embedding_backward(dy[..., C], ids[...]) attr num_embeddings -> [V, C] (deterministic scatter-add)";
  d.num_inputs = 2;
  d.infer = InferEmbeddingBackward;
  d.reference = EmbeddingBackwardRef;
  d.kernels[DeviceKind::kCPU] = KernelOrReference(EmbeddingBackwardKernel, EmbeddingBackwardRef);
  d.no_grad_reason = "backward op of embedding";
  d.cases.push_back({"V11_C5", {F({3, 7, 5}), Ids({3, 7}, DType::kI64, 11)}, Attrs{{"num_embeddings", int64_t{11}}}});
  d.cases.push_back({"V4_C37", {F({13, 37}), Ids({13}, DType::kI32, 4)}, Attrs{{"num_embeddings", int64_t{4}}}});
  return d;
}

}  // namespace

LOOM_REGISTER_OP(MakeEmbedding());
LOOM_REGISTER_OP(MakeEmbeddingBackward());

}  // namespace loom::kernels::cpu::nn::internal
