// Flash-attention forward: launchers (the kernel is in flash_fwd_kernel.cuh).
#include "kernels/cuda/attention/flash_fwd_kernel.cuh"

namespace loom::cuda::attn {
namespace {

template <int D, bool kBf16, bool kCausal>
cudaError_t LaunchFwd(const FlashParams& p, cudaStream_t s) {
  const int smem = (kFwdBM * D + 4 * kFwdBN * D) * 2;
  auto kernel = FlashFwdKernel<D, kBf16, kCausal>;
  static bool configured = false;  // per instantiation, first launch
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  dim3 grid((p.seq_q + kFwdBM - 1) / kFwdBM, p.heads, p.batch);
  kernel<<<grid, kFwdThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <int D, bool kBf16>
cudaError_t Fwd2(const FlashParams& p, cudaStream_t s) {
  return p.causal ? LaunchFwd<D, kBf16, true>(p, s) : LaunchFwd<D, kBf16, false>(p, s);
}
template <int D>
cudaError_t Fwd1(const FlashParams& p, cudaStream_t s) {
  return p.bf16 ? Fwd2<D, true>(p, s) : Fwd2<D, false>(p, s);
}

}  // namespace

cudaError_t FlashForward(const FlashParams& p, cudaStream_t s) {
  if (p.head_dim == 64) return Fwd1<64>(p, s);
  if (p.head_dim == 128) return Fwd1<128>(p, s);
  return cudaErrorInvalidValue;
}

}  // namespace loom::cuda::attn
