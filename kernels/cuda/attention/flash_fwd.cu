// Flash-attention forward: launchers (the kernel is in flash_fwd_kernel.cuh),
// one per compiled configuration (LOOM_FWD_VARIANTS), picked by
// FlashParams::fwd_variant.
#include "kernels/cuda/attention/flash_fwd_kernel.cuh"

namespace loom::kernels::cuda::attention {
namespace {

template <int D, class Cfg, bool kBf16, bool kCausal>
cudaError_t LaunchFwd(const FlashParams& p, cudaStream_t s) {
  const int smem = Cfg::SmemBytes(D);
  auto kernel = FlashFwdKernel<D, Cfg, kBf16, kCausal>;
  static bool configured = false;  // per instantiation, first launch
  if (cudaError_t e = ConfigureSmem(kernel, smem, &configured); e != cudaSuccess) return e;
  dim3 grid((p.seq_q + Cfg::BM - 1) / Cfg::BM, p.heads, p.batch);
  kernel<<<grid, Cfg::NT, smem, s>>>(p);
  return cudaGetLastError();
}

template <int D, class Cfg>
cudaError_t Fwd2(const FlashParams& p, cudaStream_t s) {
  if (p.bf16) return p.causal ? LaunchFwd<D, Cfg, true, true>(p, s) : LaunchFwd<D, Cfg, true, false>(p, s);
  return p.causal ? LaunchFwd<D, Cfg, false, true>(p, s) : LaunchFwd<D, Cfg, false, false>(p, s);
}

template <int D>
cudaError_t Fwd1(const FlashParams& p, cudaStream_t s) {
  int v = p.fwd_variant > 0 ? p.fwd_variant : FwdDefaultVariant(D);
  if (IsWsFwdVariant(v) && DeviceIsSm90()) {
    const cudaError_t e = FlashForwardWs(p, WsWarpgroups(v, D), WsStages(v), s);
    if (e != cudaErrorNotSupported) return e;
    v = kFwdWgmmaPipeVariant;
  }
  if (IsWgmmaFwdVariant(v)) {
    if (DeviceIsSm90()) return FlashForwardWgmma(p, v != kFwdWgmmaVariant, v == kFwdWgmmaPipe1Variant ? 1 : 2, s);
    v = FwdMmaDefaultVariant(D);
  }
  switch (v) {
#define LOOM_FWD_CASE(id, nw, bn, mb, mw) \
  case id:                            \
    return Fwd2<D, FwdCfg<nw, bn, mb, mw>>(p, s);
    LOOM_FWD_VARIANTS(LOOM_FWD_CASE)
#undef LOOM_FWD_CASE
  }
  return cudaErrorInvalidValue;
}

}  // namespace

// Whether the current device runs sm_90a code (compute capability 9.0),
// asked once per device.
bool DeviceIsSm90() {
  static int cached[64];  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cached[dev] = major == 9 && minor == 0 ? 1 : 2;
  }
  return cached[dev] == 1;
}

cudaError_t FlashForward(const FlashParams& p, cudaStream_t s) {
  if (p.head_dim == 64) return Fwd1<64>(p, s);
  if (p.head_dim == 128) return Fwd1<128>(p, s);
  return cudaErrorInvalidValue;
}

}  // namespace loom::kernels::cuda::attention
