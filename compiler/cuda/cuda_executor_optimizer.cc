// CudaExecutor (cuda_executor_impl.h): the optimizer launches with the
// hand-written kernels: grad norm (multi-tensor, or one launch per tensor with
// LOOM_CUDA_GRADNORM_MULTI=0) and the multi-tensor AdamW (tables uploaded here).
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"

namespace loom::compiler::cuda::cuda_executor_internal {

// Tensor t of an AdamW launch (inputs param, grad, m, v per tensor) as a table
// entry: kern::AdamWEntry (hand-written kernel) or cg::AdamWTensor (generated).
template <typename Entry>
Entry Impl::AdamWTensorEntry(const Launch& l, int t) const {
  const auto& in = l.inputs;
  Entry e;
  e.param = static_cast<float*>(Ptr(in[4 * t]));
  e.grad = Ptr(in[4 * t + 1]);
  e.grad_bf16 = Dt(in[4 * t + 1]) == DType::kBF16;
  e.m = static_cast<float*>(Ptr(in[4 * t + 2]));
  e.v = static_cast<float*>(Ptr(in[4 * t + 3]));
  e.numel = Numel(in[4 * t]);
  e.weight_decay = g_.nodes()[l.nodes[t]].attrs.GetFloat("weight_decay", 0.01);
  const int k = plan_.input_of[in[4 * t]];
  e.param_bf16 = k >= 0 ? shadow_buf_[k] : nullptr;
  return e;
}
template kern::AdamWEntry Impl::AdamWTensorEntry<kern::AdamWEntry>(const Launch& l, int t) const;
template cg::AdamWTensor Impl::AdamWTensorEntry<cg::AdamWTensor>(const Launch& l, int t) const;

// kGradNorm / kAdamW (Build: s and scratch as the closures capture them),
// unless BuildRowwise took the AdamW.
absl::Status Impl::BuildOptimizer(const Launch& l, cudaStream_t s, void* scratch, std::string* desc) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  switch (l.kind) {
    case LaunchKind::kGradNorm: {
      if (!GradNormMultiOn()) {  // LOOM_CUDA_GRADNORM_MULTI=0: one launch per tensor (A/B timing)
        struct Part {
          kern::Dt dt;
          int64_t n;
          const void* x;
          float* partials;
        };
        std::vector<Part> parts;
        float* ws = static_cast<float*>(scratch);
        int64_t off = 0;
        for (int v : in) {
          parts.push_back({ToDt(Dt(v)), Numel(v), Ptr(v), ws + off});
          off += kern::GradNormPartials(Numel(v));
        }
        float* o = static_cast<float*>(Ptr(out[0]));
        calls_.push_back([parts, ws, total = off, o, s]() {
          for (const Part& p : parts)
            LOOM_RETURN_IF_ERROR(CudaErr(kern::SumSquaresPartial(p.dt, p.n, p.x, p.partials, s), "grad_norm"));
          return CudaErr(kern::SqrtSum(ws, total, o, s), "grad_norm");
        });
        break;
      }
      // One multi-tensor launch over every gradient's chunks, then a fixed-order sqrt-sum.
      std::vector<kern::GradNormEntry> entries;
      for (int v : in) {
        kern::GradNormEntry e;
        e.x = Ptr(v);
        e.numel = Numel(v);
        e.dt = ToDt(Dt(v));
        entries.push_back(e);
      }
      void* dev_entries = nullptr;
      void* dev_chunks = nullptr;
      int64_t chunks = 0;
      if (!dry_) {
        LOOM_CU(kern::GradNormUpload(entries.data(), static_cast<int>(entries.size()), &dev_entries, &dev_chunks,
                                     &chunks),
                "grad_norm: upload");
        owned_.push_back(dev_entries);
        owned_.push_back(dev_chunks);
      }
      float* ws = static_cast<float*>(scratch);
      float* o = static_cast<float*>(Ptr(out[0]));
      absl::StrAppend(desc, " tensors=", entries.size(), " chunks=", chunks);
      calls_.push_back([dev_entries, dev_chunks, chunks, ws, o, s]() {
        return CudaErr(kern::GradNormMulti(dev_entries, dev_chunks, chunks, ws, o, s), "grad_norm");
      });
      break;
    }
    case LaunchKind::kAdamW: {
      std::vector<kern::AdamWEntry> entries;
      const int nt = static_cast<int>(l.nodes.size());
      for (int t = 0; t < nt; ++t) entries.push_back(AdamWTensorEntry<kern::AdamWEntry>(l, t));
      void* dev_entries = nullptr;
      void* dev_chunks = nullptr;
      int64_t chunks = 0;
      if (!dry_) {
        LOOM_CU(kern::AdamWUpload(entries.data(), nt, &dev_entries, &dev_chunks, &chunks), "adamw: upload");
        owned_.push_back(dev_entries);
        owned_.push_back(dev_chunks);
      }
      kern::AdamWConsts c;
      c.beta1 = l.attrs.GetFloat("beta1", 0.9);
      c.beta2 = l.attrs.GetFloat("beta2", 0.999);
      c.eps = l.attrs.GetFloat("eps", 1e-8);
      c.max_norm = l.attrs.GetFloat("max_norm", 0.0);
      const int base = 4 * nt;
      c.grad_norm = static_cast<const float*>(Ptr(in[base]));
      c.lr = static_cast<const float*>(Ptr(in[base + 1]));
      c.step = Ptr(in[base + 2]);
      const DType sdt = Dt(in[base + 2]);
      c.step_dtype = sdt == DType::kI32 ? 1 : sdt == DType::kI64 ? 2 : 0;
      absl::StrAppend(desc, " tensors=", nt, " chunks=", chunks);
      calls_.push_back([dev_entries, dev_chunks, chunks, c, s]() {
        return CudaErr(kern::AdamWStep(dev_entries, dev_chunks, chunks, c, s), "adamw");
      });
      break;
    }
    default:
      return absl::InternalError(absl::StrCat("BuildOptimizer: ", LaunchKindName(l.kind)));
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
