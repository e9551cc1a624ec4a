// Launchers of the wgmma dK/dV pass of the stored-dS flash backward
// (flash_wgmma_bwd_kernel.cuh): backward variants kBwdWgmmaDsVariant and
// kBwdWgmmaDs1Variant. Built for sm_90a only.
#include "kernels/cuda/attention/flash_wgmma_bwd_kernel.cuh"

namespace loom::kernels::cuda::attention {
namespace {

template <int D, int NWG, bool kBf16, bool kCausal>
cudaError_t Launch(const FlashParams& p, cudaStream_t s) {
  constexpr int smem = BwdSmemBytes<D, 64 * NWG>();
  auto kernel = FlashBwdWgmmaKernel<D, NWG, kBf16, kCausal>;
  static bool configured = false;  // per instantiation, first launch
  if (cudaError_t e = ConfigureSmem(kernel, smem, &configured); e != cudaSuccess) return e;
  dim3 grid((p.seq_k + 64 * NWG - 1) / (64 * NWG), p.kv_heads, p.batch);
  kernel<<<grid, 128 * NWG, smem, s>>>(p);
  return cudaGetLastError();
}

template <int D, int NWG>
cudaError_t Dispatch(const FlashParams& p, cudaStream_t s) {
  if (p.bf16) return p.causal ? Launch<D, NWG, true, true>(p, s) : Launch<D, NWG, true, false>(p, s);
  return p.causal ? Launch<D, NWG, false, true>(p, s) : Launch<D, NWG, false, false>(p, s);
}

}  // namespace

cudaError_t FlashBackwardWgmmaDkDv(const FlashParams& p, int warpgroups, cudaStream_t s) {
  if (p.head_dim == 64) return warpgroups == 1 ? Dispatch<64, 1>(p, s) : Dispatch<64, 2>(p, s);
  if (p.head_dim == 128) return warpgroups == 1 ? Dispatch<128, 1>(p, s) : Dispatch<128, 2>(p, s);
  return cudaErrorInvalidValue;
}

}  // namespace loom::kernels::cuda::attention
