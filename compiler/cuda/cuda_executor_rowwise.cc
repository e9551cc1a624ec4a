// CudaExecutor (cuda_executor_impl.h): launches of the generated row-wise
// kernels (codegen/rowwise.h, NVRTC): layernorm (with its adds), cross-entropy
// forward/backward and multi-tensor AdamW, as CudaOptions::rowgen_* choose.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"

namespace loom::compiler::cuda::cuda_executor_internal {

// The generated row-wise kernels (codegen/rowwise.h) for layernorm (always
// for the add+layernorm launch), cross-entropy and AdamW when rowgen_
// selects them. False: not handled here (the hand-written kernels run).
absl::StatusOr<bool> Impl::BuildRowwise(const Launch& l, std::string* desc) {
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  cudaStream_t s = stream_;
  switch (l.kind) {
    case LaunchKind::kLayerNorm: {
      const bool fused = in.size() > 3;  // {addends.., weight, bias} -> {sum, y, mean, rstd}
      if (!fused && !rowgen_.layernorm) return false;
      const int y = out[fused ? 1 : 0];
      const size_t na = in.size() - 2;
      cg::LnSpec sp;
      sp.cols = Sh(y).back();
      const int64_t rows = Numel(y) / std::max<int64_t>(sp.cols, 1);
      sp.dtype = Dt(y);
      sp.eps = l.attrs.GetFloat("eps", 1e-5);
      if (fused)
        for (size_t q = 0; q < na; ++q)
          sp.addends.push_back({Dt(in[q]), Numel(in[q]) == rows * sp.cols ? 0 : Numel(in[q]) / sp.cols});
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::RowwiseKernel> k, cg::RowwiseKernel::LayerNorm(sp));
      cg::LnParams p;
      for (size_t q = 0; q < (fused ? na : 1); ++q) p.in[q] = Ptr(in[q]);
      p.gamma = static_cast<const float*>(Ptr(in[na]));
      p.beta = static_cast<const float*>(Ptr(in[na + 1]));
      p.h = fused ? Ptr(out[0]) : nullptr;
      p.y = Ptr(y);
      p.mean = static_cast<float*>(Ptr(out[fused ? 2 : 1]));
      p.rstd = static_cast<float*>(Ptr(out[fused ? 3 : 2]));
      p.rows = rows;
      const cg::RowwiseKernel* kp = k.get();
      row_kernels_.push_back(std::move(k));
      absl::StrAppend(desc, " generated");
      calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
      return true;
    }
    case LaunchKind::kCrossEntropy:
    case LaunchKind::kCrossEntropyBackward: {
      if (!rowgen_.cross_entropy) return false;
      const bool fwd = l.kind == LaunchKind::kCrossEntropy;
      const int lg = in[fwd ? 0 : 1], tg = in[fwd ? 1 : 2];
      cg::CeSpec sp;
      sp.vocab = Sh(lg)[1];
      sp.dtype = Dt(lg);
      sp.target_dtype = Dt(tg);
      sp.ignore_index = l.attrs.GetInt("ignore_index", -100);
      const int64_t rows = Sh(lg)[0];
      auto k = fwd ? cg::RowwiseKernel::CeForward(sp) : cg::RowwiseKernel::CeBackward(sp);
      if (absl::IsInvalidArgument(k.status())) return false;  // e.g. f32 targets: the hand-written kernel
      LOOM_RETURN_IF_ERROR(k.status());
      const cg::RowwiseKernel* kp = k->get();
      row_kernels_.push_back(std::move(*k));
      absl::StrAppend(desc, " generated");
      if (fwd) {
        // The forward's last block re-arms its counter: it needs its own zeroed word.
        LOOM_ASSIGN_OR_RETURN(void* counter, Alloc(256));
        if (!dry_) LOOM_CU(cudaMemset(counter, 0, 256), "cross_entropy: counter");
        cg::CeFwdParams p{Ptr(lg), Ptr(tg), static_cast<float*>(Ptr(out[1])), static_cast<float*>(scratch_),
                          static_cast<float*>(Ptr(out[0])), static_cast<unsigned*>(counter), rows};
        calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
      } else {
        cg::CeBwdParams p{static_cast<const float*>(Ptr(in[0])), Ptr(lg), Ptr(tg),
                          static_cast<const float*>(Ptr(in[3])), Ptr(out[0]), static_cast<float*>(scratch_), rows};
        calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
      }
      return true;
    }
    case LaunchKind::kAdamW: {
      if (!rowgen_.adamw) return false;
      const int nt = static_cast<int>(l.nodes.size());
      const int base = 4 * nt;
      cg::AdamWSpec sp;
      sp.beta1 = l.attrs.GetFloat("beta1", 0.9);
      sp.beta2 = l.attrs.GetFloat("beta2", 0.999);
      sp.eps = l.attrs.GetFloat("eps", 1e-8);
      sp.max_norm = l.attrs.GetFloat("max_norm", 0.0);
      sp.step_dtype = Dt(in[base + 2]);
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::RowwiseKernel> k, cg::RowwiseKernel::AdamW(sp));
      std::vector<cg::AdamWTensor> tensors;
      for (int t = 0; t < nt; ++t) tensors.push_back(AdamWTensorEntry<cg::AdamWTensor>(l, t));
      std::vector<cg::AdamWChunk> chunks = cg::AdamWTable(tensors);
      const int64_t tb = sizeof(cg::AdamWTensor) * tensors.size(), cb = sizeof(cg::AdamWChunk) * chunks.size();
      LOOM_ASSIGN_OR_RETURN(void* dt, Alloc(tb));
      LOOM_ASSIGN_OR_RETURN(void* dc, Alloc(cb));
      if (!dry_) {
        LOOM_CU(cudaMemcpy(dt, tensors.data(), tb, cudaMemcpyHostToDevice), "adamw: tensor table");
        LOOM_CU(cudaMemcpy(dc, chunks.data(), cb, cudaMemcpyHostToDevice), "adamw: chunk table");
      }
      cg::AdamWParams p{static_cast<const cg::AdamWTensor*>(dt), static_cast<const cg::AdamWChunk*>(dc),
                        static_cast<const float*>(Ptr(in[base + 1])), Ptr(in[base + 2]),
                        static_cast<const float*>(Ptr(in[base])), static_cast<int64_t>(chunks.size())};
      const cg::RowwiseKernel* kp = k.get();
      row_kernels_.push_back(std::move(k));
      absl::StrAppend(desc, " generated tensors=", nt, " chunks=", chunks.size());
      calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
      return true;
    }
    default: return false;
  }
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
