// CudaExecutor (cuda_executor_impl.h): launches of the hand-written kernels
// (lowering_kernels.h, kernels/cuda/ops.h): embedding (+backward), sum_to,
// layernorm / rmsnorm (+backward), rope, cross-entropy (+backward).
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/ops.h"

namespace loom::compiler::cuda::cuda_executor_internal {

// One of the kinds above (Build: s and scratch as the closures capture them);
// the generated row-wise kernels take layernorm and cross-entropy first when
// chosen (BuildRowwise).
absl::Status Impl::BuildKernel(const Launch& l, cudaStream_t s, void* scratch) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  switch (l.kind) {
    case LaunchKind::kEmbedding: {
      const kern::Dt wdt = ToDt(Dt(in[0])), odt = ToDt(Dt(out[0])), idt = ToDt(Dt(in[1]));
      const int64_t rows = Numel(in[1]), cols = Sh(in[0])[1], vocab = Sh(in[0])[0];
      const void* w = Ptr(in[0]);
      const void* ids = Ptr(in[1]);
      void* o = Ptr(out[0]);
      calls_.push_back([=]() { return CudaErr(kern::Embedding(wdt, odt, idt, rows, cols, vocab, w, ids, o, s), "embedding"); });
      break;
    }
    case LaunchKind::kEmbeddingBackward: {
      const kern::Dt ddt = ToDt(Dt(in[0])), idt = ToDt(Dt(in[1]));
      const int64_t rows = Numel(in[1]), cols = Sh(out[0])[1], vocab = Sh(out[0])[0];
      const void* dy = Ptr(in[0]);
      const void* ids = Ptr(in[1]);
      float* o = static_cast<float*>(Ptr(out[0]));
      calls_.push_back(
          [=]() { return CudaErr(kern::EmbeddingBackward(ddt, idt, rows, cols, vocab, dy, ids, o, s), "embedding_backward"); });
      break;
    }
    case LaunchKind::kSumTo: {
      const kern::Dt xdt = ToDt(Dt(in[0])), odt = ToDt(Dt(out[0]));
      const int64_t cols = Numel(out[0]), rows = Numel(in[0]) / std::max<int64_t>(cols, 1);
      const void* x = Ptr(in[0]);
      void* o = Ptr(out[0]);
      float* ws = static_cast<float*>(scratch);
      calls_.push_back([=]() { return CudaErr(kern::SumRows(xdt, odt, rows, cols, x, o, ws, s), "sum_to"); });
      break;
    }
    case LaunchKind::kLayerNorm: {
      loom::cuda::LayerNormFwdArgs a;
      a.dtype = Dt(in[0]);
      a.cols = Sh(in[0]).back();
      a.rows = Numel(in[0]) / a.cols;
      a.x = Ptr(in[0]);
      a.weight = static_cast<const float*>(Ptr(in[1]));
      a.bias = static_cast<const float*>(Ptr(in[2]));
      a.y = Ptr(out[0]);
      a.mean = static_cast<float*>(Ptr(out[1]));
      a.rstd = static_cast<float*>(Ptr(out[2]));
      a.eps = static_cast<float>(l.attrs.GetFloat("eps", 1e-5));
      a.stream = s;
      calls_.push_back([a]() { return loom::cuda::LayerNormForward(a); });
      break;
    }
    case LaunchKind::kLayerNormBackward: {
      loom::cuda::LayerNormBwdArgs a;
      a.dtype = Dt(in[0]);
      a.cols = Sh(in[1]).back();
      a.rows = Numel(in[1]) / a.cols;
      a.dy = Ptr(in[0]);
      a.x = Ptr(in[1]);
      a.weight = static_cast<const float*>(Ptr(in[2]));
      a.mean = static_cast<const float*>(Ptr(in[3]));
      a.rstd = static_cast<const float*>(Ptr(in[4]));
      a.dx = Ptr(out[0]);
      a.dweight = static_cast<float*>(Ptr(out[1]));
      a.dbias = static_cast<float*>(Ptr(out[2]));
      a.workspace = static_cast<float*>(scratch);
      if (in.size() > 5) a.dresidual = Ptr(in[5]);  // layernorm_backward+add
      if (out.size() > 3) a.dx_colsum = static_cast<float*>(Ptr(out[3]));  // ...+sum_to
      a.stream = s;
      calls_.push_back([a]() { return loom::cuda::LayerNormBackward(a); });
      break;
    }
    case LaunchKind::kRmsNorm: {
      const kern::Dt dt = ToDt(Dt(in[0]));
      const int64_t cols = Sh(in[0]).back(), rows = Numel(in[0]) / std::max<int64_t>(cols, 1);
      const double eps = l.attrs.GetFloat("eps", 1e-6);
      const void* x = Ptr(in[0]);
      const float* w = static_cast<const float*>(Ptr(in[1]));
      void* y = Ptr(out[0]);
      float* rstd = static_cast<float*>(Ptr(out[1]));
      calls_.push_back([=]() { return CudaErr(kern::RmsNormForward(dt, rows, cols, x, w, eps, y, rstd, s), "rmsnorm"); });
      break;
    }
    case LaunchKind::kRmsNormBackward: {
      const kern::Dt dt = ToDt(Dt(in[0]));
      const int64_t cols = Sh(in[1]).back(), rows = Numel(in[1]) / std::max<int64_t>(cols, 1);
      const void* dy = Ptr(in[0]);
      const void* x = Ptr(in[1]);
      const float* w = static_cast<const float*>(Ptr(in[2]));
      const float* rstd = static_cast<const float*>(Ptr(in[3]));
      void* dx = Ptr(out[0]);
      float* dw = static_cast<float*>(Ptr(out[1]));
      float* ws = static_cast<float*>(scratch);
      calls_.push_back([=]() {
        return CudaErr(kern::RmsNormBackward(dt, rows, cols, dy, x, w, rstd, dx, dw, ws, s), "rmsnorm_backward");
      });
      break;
    }
    case LaunchKind::kRope: {
      const kern::Dt dt = ToDt(Dt(in[0]));
      const Shape& sh = Sh(in[0]);
      const int64_t B = sh[0], T = sh[1], H = sh[2], D = sh[3];
      const double theta = l.attrs.GetFloat("theta", 10000.0);
      const int64_t offset = l.attrs.GetInt("offset", 0);
      const bool inverse = l.attrs.GetBool("inverse", false);
      const void* x = Ptr(in[0]);
      void* y = Ptr(out[0]);
      calls_.push_back([=]() { return CudaErr(kern::Rope(dt, B, T, H, D, theta, offset, inverse, x, y, s), "rope"); });
      break;
    }
    case LaunchKind::kCrossEntropy: {
      const kern::Dt ldt = ToDt(Dt(in[0])), tdt = ToDt(Dt(in[1]));
      const int64_t rows = Sh(in[0])[0], vocab = Sh(in[0])[1];
      const int64_t ignore = l.attrs.GetInt("ignore_index", -100);
      const void* lg = Ptr(in[0]);
      const void* t = Ptr(in[1]);
      float* loss = static_cast<float*>(Ptr(out[0]));
      float* lse = static_cast<float*>(Ptr(out[1]));
      float* rl = static_cast<float*>(scratch);
      calls_.push_back([=]() {
        return CudaErr(kern::CrossEntropyForward(ldt, tdt, rows, vocab, lg, t, ignore, lse, rl, loss, s), "cross_entropy");
      });
      break;
    }
    case LaunchKind::kCrossEntropyBackward: {
      const kern::Dt ldt = ToDt(Dt(in[1])), tdt = ToDt(Dt(in[2]));
      const int64_t rows = Sh(in[1])[0], vocab = Sh(in[1])[1];
      const int64_t ignore = l.attrs.GetInt("ignore_index", -100);
      const float* dl = static_cast<const float*>(Ptr(in[0]));
      const void* lg = Ptr(in[1]);
      const void* t = Ptr(in[2]);
      const float* lse = static_cast<const float*>(Ptr(in[3]));
      void* o = Ptr(out[0]);
      float* ws = static_cast<float*>(scratch);
      calls_.push_back([=]() {
        return CudaErr(kern::CrossEntropyBackward(ldt, tdt, rows, vocab, dl, lg, t, lse, ignore, o, ws, s),
                       "cross_entropy_backward");
      });
      break;
    }
    case LaunchKind::kCrossEntropyFused: {  // inputs dloss, logits, targets; outputs loss, lse, dlogits
      const kern::Dt ldt = ToDt(Dt(in[1])), tdt = ToDt(Dt(in[2]));
      const int64_t rows = Sh(in[1])[0], vocab = Sh(in[1])[1];
      const int64_t ignore = l.attrs.GetInt("ignore_index", -100);
      const float* dl = static_cast<const float*>(Ptr(in[0]));
      const void* lg = Ptr(in[1]);
      const void* t = Ptr(in[2]);
      float* loss = static_cast<float*>(Ptr(out[0]));
      float* lse = static_cast<float*>(Ptr(out[1]));
      void* o = Ptr(out[2]);
      float* ws = static_cast<float*>(scratch);
      calls_.push_back([=]() {
        return CudaErr(kern::CrossEntropyFused(ldt, tdt, rows, vocab, dl, lg, t, ignore, lse, loss, o, ws, s),
                       "cross_entropy_fused");
      });
      break;
    }
    default:
      return absl::InternalError(absl::StrCat("BuildKernel: ", LaunchKindName(l.kind)));
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
