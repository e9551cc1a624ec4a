// CudaExecutor (cuda_executor_impl.h): the optimizer launches — the gradient
// norm (one multi-tensor launch of kernels/cuda/reductions.h over every
// gradient) and the multi-tensor AdamW (the generated kernel of
// kernels/cuda/codegen/rowwise.h), their device tables uploaded here once.
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/reductions.h"

namespace loom::compiler::cuda::cuda_executor_internal {

// One multi-tensor launch over every gradient's chunks, then a fixed-order sqrt-sum.
absl::Status Impl::BuildGradNorm(const Launch& l, std::string* desc) {
  std::vector<kern::GradNormEntry> entries;
  for (int v : l.inputs) {
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
  float* ws = static_cast<float*>(scratch_);
  float* o = static_cast<float*>(Ptr(l.outputs[0]));
  absl::StrAppend(desc, " tensors=", entries.size(), " chunks=", chunks);
  cudaStream_t s = stream_;
  calls_.push_back([dev_entries, dev_chunks, chunks, ws, o, s]() {
    return CudaErr(kern::GradNormMulti(dev_entries, dev_chunks, chunks, ws, o, s), "grad_norm");
  });
  return absl::OkStatus();
}

// Inputs: param, grad, m, v per tensor, then grad_norm, lr, step (plan.h).
absl::Status Impl::BuildAdamW(const Launch& l, std::string* desc) {
  const auto& in = l.inputs;
  const int nt = static_cast<int>(l.nodes.size());
  const int base = 4 * nt;
  cg::AdamWSpec sp;
  sp.beta1 = l.attrs.GetFloat("beta1", 0.9);
  sp.beta2 = l.attrs.GetFloat("beta2", 0.999);
  sp.eps = l.attrs.GetFloat("eps", 1e-8);
  sp.max_norm = l.attrs.GetFloat("max_norm", 0.0);
  sp.step_dtype = Dt(in[base + 2]);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::RowwiseKernel> k, cg::RowwiseKernel::Uncompiled(cg::GenerateAdamW(sp)));
  std::vector<cg::AdamWTensor> tensors;
  for (int t = 0; t < nt; ++t) {
    cg::AdamWTensor e;
    e.param = Ptr(in[4 * t]);
    e.grad = Ptr(in[4 * t + 1]);
    e.grad_bf16 = Dt(in[4 * t + 1]) == DType::kBF16;
    e.m = Ptr(in[4 * t + 2]);
    e.v = Ptr(in[4 * t + 3]);
    e.states_bf16 = Dt(in[4 * t + 2]) == DType::kBF16;
    e.numel = Numel(in[4 * t]);
    e.weight_decay = g_.nodes()[l.nodes[t]].attrs.GetFloat("weight_decay", 0.01);
    e.seed = static_cast<uint32_t>(t);
    const int input = plan_.input_of[in[4 * t]];
    e.split = input >= 0 && plan_.split[input];
    e.param_bf16 = input >= 0 && !e.split ? shadow_buf_[input] : nullptr;
    tensors.push_back(e);
  }
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
  cudaStream_t s = stream_;
  calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
