// Flash-attention backward: launchers (the kernels are in flash_bwd_kernel.cuh),
// one per compiled configuration, picked by FlashParams::bwd_variant and
// dq_variant (see the header of flash_bwd_kernel.cuh for the two schemes).
#include "kernels/cuda/attention/flash_bwd_kernel.cuh"

namespace loom::kernels::cuda::attention {
namespace {

template <int D, class Cfg, int kMode, bool kBf16, bool kCausal>
cudaError_t LaunchDkDv(const FlashParams& p, cudaStream_t s) {
  const int smem = Cfg::SmemBytes(D, kMode != kDqSeparate);
  auto kernel = FlashBwdKernel<D, Cfg, kMode, kBf16, kCausal>;
  static bool configured = false;  // per instantiation, first launch
  cudaError_t e = ConfigureSmem(kernel, smem, &configured);
  if (e != cudaSuccess) return e;
  dim3 grid((p.seq_k + Cfg::BN - 1) / Cfg::BN, p.kv_heads, p.batch);
  kernel<<<grid, Cfg::NT, smem, s>>>(p);
  return cudaGetLastError();
}

template <int D, class Cfg, bool kBf16, bool kCausal>
cudaError_t LaunchDq(const FlashParams& p, cudaStream_t s) {
  const int smem = Cfg::SmemBytes(D);
  auto kernel = FlashBwdDqKernel<D, Cfg, kBf16, kCausal>;
  static bool configured = false;
  cudaError_t e = ConfigureSmem(kernel, smem, &configured);
  if (e != cudaSuccess) return e;
  dim3 grid((p.seq_q + Cfg::BM - 1) / Cfg::BM, p.heads, p.batch);
  kernel<<<grid, Cfg::NT, smem, s>>>(p);
  return cudaGetLastError();
}

template <int D, bool kBf16, bool kCausal>
cudaError_t LaunchDqFromDs(const FlashParams& p, cudaStream_t s) {
  constexpr int NW = kDqFromDsWarps, BM = 32 * NW;
  const int smem = 2 * (kDsTile * BM + kDsTile * D) * 2;
  auto kernel = FlashBwdDqFromDsKernel<D, NW, kBf16, kCausal>;
  static bool configured = false;
  cudaError_t e = ConfigureSmem(kernel, smem, &configured);
  if (e != cudaSuccess) return e;
  dim3 grid((p.seq_q + BM - 1) / BM, p.heads, p.batch);
  kernel<<<grid, 32 * NW, smem, s>>>(p);
  return cudaGetLastError();
}

template <int D, bool kBf16, bool kCausal>
cudaError_t Bwd3(const FlashParams& p, cudaStream_t s) {
  const dim3 pre_grid((p.seq_q + kPreRows<D> - 1) / kPreRows<D>, p.heads, p.batch);
  const int bv = p.bwd_variant > 0 ? p.bwd_variant : BwdDefaultVariant(D);
  if (IsAtomicDqVariant(bv)) {  // the accumulator zeroed, dQ summed into it, then scaled and rounded
    BwdPreprocessKernel<D, kBf16, true><<<pre_grid, 256, 0, s>>>(p);
    cudaError_t e = cudaErrorNotSupported;
    if (bv == kBwdWsAtomicVariant && DeviceIsSm90()) e = FlashBackwardWsAtomicDq(p, s);
    if (e == cudaErrorNotSupported) e = LaunchDkDv<D, BwdAtomicCfg<D>, kDqAtomic, kBf16, kCausal>(p, s);
    if (e != cudaSuccess) return e;
    BwdConvertDqKernel<D, kBf16><<<pre_grid, 256, 0, s>>>(p);
    return cudaGetLastError();
  }
  BwdPreprocessKernel<D, kBf16, false><<<pre_grid, 256, 0, s>>>(p);
  if (IsDsVariant(bv)) {  // the wgmma or warp-specialised dK/dV pass on compute capability 9.0, else mma.sync's
    const bool sm90 = bv != kBwdDsVariant && DeviceIsSm90();
    cudaError_t e = cudaErrorNotSupported;
    if (sm90 && IsWsBwdVariant(bv)) e = FlashBackwardWsDkDv(p, bv == kBwdWsDs1Variant ? 1 : 2, s);
    if (e == cudaErrorNotSupported)
      e = sm90 ? FlashBackwardWgmmaDkDv(p, bv == kBwdWgmmaDs1Variant || bv == kBwdWsDs1Variant ? 1 : 2, s)
               : LaunchDkDv<D, BwdDsCfg, kDqStoreDs, kBf16, kCausal>(p, s);
    return e != cudaSuccess ? e : LaunchDqFromDs<D, kBf16, kCausal>(p, s);
  }
  cudaError_t e = cudaErrorInvalidValue;
  switch (bv) {
#define LOOM_BWD_CASE(id, nw, bm, mb)                                    \
  case id:                                                               \
    e = LaunchDkDv<D, BwdCfg<nw, bm, mb>, kDqSeparate, kBf16, kCausal>(p, s); \
    break;
    LOOM_BWD_VARIANTS(LOOM_BWD_CASE)
#undef LOOM_BWD_CASE
  }
  if (e != cudaSuccess) return e;
  const int qv = p.dq_variant > 0 ? p.dq_variant : DqDefaultVariant(D);
  switch (qv) {
#define LOOM_DQ_CASE(id, nw, bn, mb) \
  case id:                           \
    return LaunchDq<D, DqCfg<nw, bn, mb>, kBf16, kCausal>(p, s);
    LOOM_DQ_VARIANTS(LOOM_DQ_CASE)
#undef LOOM_DQ_CASE
  }
  return cudaErrorInvalidValue;
}

template <int D>
cudaError_t Bwd1(const FlashParams& p, cudaStream_t s) {
  if (p.bf16) return p.causal ? Bwd3<D, true, true>(p, s) : Bwd3<D, true, false>(p, s);
  return p.causal ? Bwd3<D, false, true>(p, s) : Bwd3<D, false, false>(p, s);
}

}  // namespace

cudaError_t FlashBackward(const FlashParams& p, cudaStream_t s) {
  if (p.head_dim == 64) return Bwd1<64>(p, s);
  if (p.head_dim == 128) return Bwd1<128>(p, s);
  return cudaErrorInvalidValue;
}

}  // namespace loom::kernels::cuda::attention
