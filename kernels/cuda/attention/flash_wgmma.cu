// Launchers of the wgmma flash forward (flash_wgmma_fwd_kernel.cuh): variants
// kFwdWgmmaVariant, kFwdWgmmaPipeVariant and kFwdWgmmaPipe1Variant. Built for
// sm_90a only (its own BUILD target); FlashForward calls it only on a
// compute-capability-9.0 device.
#include "kernels/cuda/attention/flash_wgmma_fwd_kernel.cuh"

namespace loom::kernels::cuda::attention {
namespace {

template <int D, int NWG, bool kBf16, bool kCausal, bool kPipe>
cudaError_t Launch(const FlashParams& p, cudaStream_t s) {
  constexpr int smem = WgmmaSmemBytes<D, 64 * NWG>();
  auto kernel = FlashFwdWgmmaKernel<D, NWG, kBf16, kCausal, kPipe>;
  static bool configured = false;  // per instantiation, first launch
  if (cudaError_t e = ConfigureSmem(kernel, smem, &configured); e != cudaSuccess) return e;
  dim3 grid((p.seq_q + 64 * NWG - 1) / (64 * NWG), p.heads, p.batch);
  kernel<<<grid, 128 * NWG, smem, s>>>(p);
  return cudaGetLastError();
}

template <int D, int NWG, bool kPipe>
cudaError_t Dispatch(const FlashParams& p, cudaStream_t s) {
  if (p.bf16) return p.causal ? Launch<D, NWG, true, true, kPipe>(p, s) : Launch<D, NWG, true, false, kPipe>(p, s);
  return p.causal ? Launch<D, NWG, false, true, kPipe>(p, s) : Launch<D, NWG, false, false, kPipe>(p, s);
}

template <int D>
cudaError_t DispatchD(const FlashParams& p, bool pipelined, int warpgroups, cudaStream_t s) {
  if (!pipelined) return Dispatch<D, 2, false>(p, s);
  return warpgroups == 1 ? Dispatch<D, 1, true>(p, s) : Dispatch<D, 2, true>(p, s);
}

}  // namespace

cudaError_t FlashForwardWgmma(const FlashParams& p, bool pipelined, int warpgroups, cudaStream_t s) {
  if (p.head_dim == 64) return DispatchD<64>(p, pipelined, warpgroups, s);
  if (p.head_dim == 128) return DispatchD<128>(p, pipelined, warpgroups, s);
  return cudaErrorInvalidValue;
}

}  // namespace loom::kernels::cuda::attention
