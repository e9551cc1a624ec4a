// Internal: raw launchers of the flash-attention kernels (flash_fwd.cu,
// flash_bwd.cu). Only flash_attention.cc calls these, after validating the
// arguments; no Loom or Abseil header here so that nvcc needs nothing else.
// Layouts: q/o/do/dq [B, H, Tq, D], k/v/dk/dv [B, Hkv, Tk, D], each with its
// own batch, head and row element strides (the last dim contiguous; the
// kernels read resolved strides: ResolveDefaultStrides fills zeros with the
// contiguous ones), lse/delta [B, H, Tq] f32 and dq_accum [B, H, Tq, D] f32
// contiguous. Each launcher returns the launch error.
#pragma once

#include <cstdint>
#include <initializer_list>

#ifndef LOOM_ATTN_EMULATE
#include <cuda_runtime.h>
#endif

namespace loom::kernels::cuda::attention {

// Element strides of one [B, heads, T, D] tensor (D contiguous).
struct TensorStrides {
  int64_t b = 0, h = 0, r = 0;
};

struct FlashParams {
  int bf16 = 1;  // 1: bf16, 0: f16
  int batch = 0, heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  int causal = 0;
  int deterministic = 0;  // backward: never the atomic-dQ variant
  // Compiled kernel configurations (0: the default for D), flash_variants.h:
  // fwd_variant indexes LOOM_FWD_VARIANTS, bwd_variant LOOM_BWD_VARIANTS (or
  // kBwdAtomicVariant, the single pass with f32 atomic dQ, or
  // kBwdDsVariant, dS stored then dQ from it), dq_variant
  // LOOM_DQ_VARIANTS.
  int fwd_variant = 0;
  int bwd_variant = 0;
  int dq_variant = 0;
  float scale = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // null in a forward: not written (inference)
  // Backward only.
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* dq_accum = nullptr;
  float* delta = nullptr;
  // Stored-dS variant (kBwdDsVariant): dS^T as [B * heads][ds_keys][ds_ld]
  // elements of q's dtype, ds_bh = ds_keys * ds_ld apart (flash_variants.h:
  // DsKeys / DsQueries give the padded sizes).
  void* ds = nullptr;
  int64_t ds_ld = 0, ds_bh = 0;
  int ds_keys = 0;
  // Element strides (0 before ResolveDefaultStrides: contiguous).
  TensorStrides sq, sk, sv, so, sdo, sdq, sdk, sdv;
};

// Replaces each 0 stride with the contiguous [B, heads, T, D] one.
inline void ResolveDefaultStrides(FlashParams* p) {
  const int64_t d = p->head_dim;
  auto fix = [d](TensorStrides* s, int64_t heads, int64_t t) {
    if (s->r == 0) s->r = d;
    if (s->h == 0) s->h = t * d;
    if (s->b == 0) s->b = heads * t * d;
  };
  for (TensorStrides* s : {&p->sq, &p->so, &p->sdo, &p->sdq}) fix(s, p->heads, p->seq_q);
  for (TensorStrides* s : {&p->sk, &p->sv, &p->sdk, &p->sdv}) fix(s, p->kv_heads, p->seq_k);
}

#ifndef LOOM_ATTN_EMULATE
// Raises a kernel's dynamic shared-memory limit to `smem` bytes on its first
// launch (*configured: the caller's per-instantiation flag).
template <class Kernel>
cudaError_t ConfigureSmem(Kernel kernel, int smem, bool* configured) {
  if (*configured) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess) *configured = true;
  return e;
}

cudaError_t FlashForward(const FlashParams& p, cudaStream_t s);
// The wgmma forward (flash_wgmma.cu, sm_90a code): FlashForward routes
// kFwdWgmmaVariant (pipelined: kFwdWgmmaPipeVariant, and with one warpgroup
// per block kFwdWgmmaPipe1Variant) here on a compute-capability-9.0 device.
cudaError_t FlashForwardWgmma(const FlashParams& p, bool pipelined, int warpgroups, cudaStream_t s);
// The warp-specialised forward (flash_ws.cu, sm_90a code): the
// kFwdWs*Variant with `warpgroups` consumers (WsWarpgroups) and a ring of
// `stages` K/V stages (WsStages) on a compute-capability-9.0 device.
// cudaErrorNotSupported when TMA cannot address an operand.
cudaError_t FlashForwardWs(const FlashParams& p, int warpgroups, int stages, cudaStream_t s);
// The wgmma dK/dV pass of the stored-dS backward (flash_wgmma_bwd.cu): dK, dV
// and dS^T to p.ds, as FlashBwdKernel<kDqStoreDs> does (delta precomputed).
// warpgroups: per block (2: kBwdWgmmaDsVariant, 1: kBwdWgmmaDs1Variant).
cudaError_t FlashBackwardWgmmaDkDv(const FlashParams& p, int warpgroups, cudaStream_t s);
// The warp-specialised dK/dV pass (flash_ws.cu), the same outputs:
// warpgroups = consumers per block (2: kBwdWsDsVariant, 1:
// kBwdWsDs1Variant). cudaErrorNotSupported when TMA cannot address an
// operand.
cudaError_t FlashBackwardWsDkDv(const FlashParams& p, int warpgroups, cudaStream_t s);
// The warp-specialised one-pass backward (flash_ws.cu): dK, dV, and dS K
// added into p.dq_accum (zeroed before; delta precomputed).
// cudaErrorNotSupported when TMA cannot address an operand.
cudaError_t FlashBackwardWsAtomicDq(const FlashParams& p, cudaStream_t s);
// The warp-specialised kernels' tensor maps for p (the forward's, or the
// backward's with dq_accum's): the name of the first one the driver refuses
// or TMA cannot address ("lse", ...), with the CUresult in *result
// (kWsMapNotAddressable: alignment or size, the documented fallback), or
// null when every map encodes. A null return means those kernels run
// rather than a fallback.
constexpr int kWsMapNotAddressable = -1;
const char* FlashWsMapsCheck(const FlashParams& p, bool backward, int* result);
// Whether the current device is compute capability 9.0 (runs sm_90a code).
bool DeviceIsSm90();
// Needs o and lse of the forward, and dq_accum/delta workspace.
cudaError_t FlashBackward(const FlashParams& p, cudaStream_t s);
#endif

}  // namespace loom::kernels::cuda::attention
