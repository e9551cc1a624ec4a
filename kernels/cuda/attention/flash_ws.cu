// Launchers of the warp-specialised flash forward (flash_ws_fwd_kernel.cuh:
// the kFwdWs*Variant) and dK/dV pass (flash_ws_bwd_kernel.cuh:
// kBwdWsDsVariant, kBwdWsDs1Variant). Built for sm_90a only; the
// tensor maps are encoded here, on the host, through the driver's
// cuTensorMapEncodeTiled (found through the runtime, so nothing links
// libcuda directly).
#include <cudaTypedefs.h>

#include "kernels/cuda/attention/flash_ws_bwd_kernel.cuh"
#include "kernels/cuda/attention/flash_ws_fwd_kernel.cuh"

namespace loom::kernels::cuda::attention {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A [B, heads, T, D] operand (element strides `st`) as a 4-d tensor map
// (D innermost), read in boxes of 64 columns by `box_rows` rows, stored with
// the 128-byte swizzle; false when TMA cannot address it (alignment).
bool EncodeTmaMap(tma::TmaMap* m, const void* base, bool bf16, int d, int64_t t, int64_t heads, int64_t batch,
                  const TensorStrides& st, int box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(t),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(st.r) * 2, static_cast<cuuint64_t>(st.h) * 2,
                                 static_cast<cuuint64_t>(st.b) * 2};
  for (cuuint64_t s : strides)
    if (s % 16 != 0 || s >= (cuuint64_t{1} << 40)) return false;
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode(&m->map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A flat f32 array of n elements as a 1-d tensor map, read in unswizzled
// boxes of `box` elements.
bool EncodeTmaMap1d(tma::TmaMap* m, const float* base, int64_t n, int box) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || n < 1 || n >= (int64_t{1} << 31))
    return false;
  const cuuint64_t dims[1] = {static_cast<cuuint64_t>(n)};
  const cuuint32_t boxes[1] = {static_cast<cuuint32_t>(box)}, elem_strides[1] = {1};
  return encode(&m->map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, const_cast<float*>(base), dims, nullptr, boxes,
                elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One launch of `kernel` (dynamic shared memory `smem`, raised on its first
// launch: *configured is the instantiation's flag) over (tiles, heads,
// batch) blocks of 128 (nwg + 1) threads.
template <class Kernel, class Params>
cudaError_t LaunchWs(Kernel kernel, int smem, bool* configured, int tiles, int heads, int batch, int nwg,
                     const Params& w, cudaStream_t s) {
  if (cudaError_t e = ConfigureSmem(kernel, smem, configured); e != cudaSuccess) return e;
  kernel<<<dim3(tiles, heads, batch), 128 * (nwg + 1), smem, s>>>(w);
  return cudaGetLastError();
}

template <int D, int NWG, int S, bool kBf16, bool kCausal>
cudaError_t Launch(const FlashWsParams& w, cudaStream_t s) {
  static_assert(WsLayout<D, NWG, S>::kFits, "the blocks' shared memory exceeds the SM's");
  static bool configured = false;  // per instantiation, first launch
  const FlashParams& p = w.p;
  return LaunchWs(FlashFwdWsKernel<D, NWG, S, kBf16, kCausal>, WsLayout<D, NWG, S>::kSmemBytes, &configured,
                  (p.seq_q + 64 * NWG - 1) / (64 * NWG), p.heads, p.batch, NWG, w, s);
}

template <int D, int NWG, int S = kWsStages>
cudaError_t Dispatch(const FlashWsParams& w, cudaStream_t s) {
  if (w.p.bf16)
    return w.p.causal ? Launch<D, NWG, S, true, true>(w, s) : Launch<D, NWG, S, true, false>(w, s);
  return w.p.causal ? Launch<D, NWG, S, false, true>(w, s) : Launch<D, NWG, S, false, false>(w, s);
}

template <int D, int NWG, bool kBf16, bool kCausal>
cudaError_t LaunchBwd(const FlashWsBwdParams& w, cudaStream_t s) {
  static bool configured = false;  // per instantiation, first launch
  const FlashParams& p = w.p;
  return LaunchWs(FlashBwdWsKernel<D, NWG, kBf16, kCausal>, WsBwdLayout<D, NWG>::kSmemBytes, &configured,
                  (p.seq_k + 64 * NWG - 1) / (64 * NWG), p.kv_heads, p.batch, NWG, w, s);
}

template <int D, int NWG>
cudaError_t DispatchBwd(const FlashWsBwdParams& w, cudaStream_t s) {
  if (w.p.bf16)
    return w.p.causal ? LaunchBwd<D, NWG, true, true>(w, s) : LaunchBwd<D, NWG, true, false>(w, s);
  return w.p.causal ? LaunchBwd<D, NWG, false, true>(w, s) : LaunchBwd<D, NWG, false, false>(w, s);
}

}  // namespace

cudaError_t FlashForwardWs(const FlashParams& p, int warpgroups, int stages, cudaStream_t s) {
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
  if (warpgroups < 1 || warpgroups > 3 || (p.head_dim == 128 && warpgroups != 2)) return cudaErrorInvalidValue;
  if (stages != 2 && (stages != 3 || (p.head_dim == 64 && warpgroups != 1))) return cudaErrorInvalidValue;
  FlashWsParams w;
  w.p = p;
  const bool bf = p.bf16 != 0;
  if (!EncodeTmaMap(&w.q, p.q, bf, p.head_dim, p.seq_q, p.heads, p.batch, p.sq, 64 * warpgroups) ||
      !EncodeTmaMap(&w.k, p.k, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sk, kWgFwdBN) ||
      !EncodeTmaMap(&w.v, p.v, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sv, kWgFwdBN))
    return cudaErrorNotSupported;
  if (p.head_dim == 128) return stages == 3 ? Dispatch<128, 2, 3>(w, s) : Dispatch<128, 2>(w, s);
  if (stages == 3) return Dispatch<64, 1, 3>(w, s);
  return warpgroups == 1 ? Dispatch<64, 1>(w, s) : warpgroups == 2 ? Dispatch<64, 2>(w, s) : Dispatch<64, 3>(w, s);
}

cudaError_t FlashBackwardWsDkDv(const FlashParams& p, int warpgroups, cudaStream_t s) {
  if ((p.head_dim != 64 && p.head_dim != 128) || (warpgroups != 1 && warpgroups != 2)) return cudaErrorInvalidValue;
  FlashWsBwdParams w;
  w.p = p;
  const bool bf = p.bf16 != 0;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  const int kv_rows = 64 * warpgroups;
  if (!EncodeTmaMap(&w.k, p.k, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sk, kv_rows) ||
      !EncodeTmaMap(&w.v, p.v, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sv, kv_rows) ||
      !EncodeTmaMap(&w.q, p.q, bf, p.head_dim, p.seq_q, p.heads, p.batch, p.sq, kWgBwdBM) ||
      !EncodeTmaMap(&w.dout, p.dout, bf, p.head_dim, p.seq_q, p.heads, p.batch, p.sdo, kWgBwdBM) ||
      !EncodeTmaMap1d(&w.lse, p.lse, rows, kWgBwdBM) || !EncodeTmaMap1d(&w.delta, p.delta, rows, kWgBwdBM))
    return cudaErrorNotSupported;
  if (p.head_dim == 64) return warpgroups == 1 ? DispatchBwd<64, 1>(w, s) : DispatchBwd<64, 2>(w, s);
  return warpgroups == 1 ? DispatchBwd<128, 1>(w, s) : DispatchBwd<128, 2>(w, s);
}

}  // namespace loom::kernels::cuda::attention
