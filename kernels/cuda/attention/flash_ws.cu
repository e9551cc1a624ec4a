// Launchers of the warp-specialised flash forward (flash_ws_fwd_kernel.cuh:
// the kFwdWs*Variant), dK/dV pass and one-pass backward
// (flash_ws_bwd_kernel.cuh: kBwdWsDsVariant, kBwdWsDs1Variant,
// kBwdWsAtomicVariant). Built for sm_90a only; the
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

// The encoders below return the driver's result, or CUDA_ERROR_NOT_SUPPORTED
// when TMA cannot address the tensor (alignment, size) or the driver has no
// encoder; FlashWsMapsCheck reports the first map refused.
//
// A [B, heads, T, D] tensor (element strides `st`, elements of `elem` bytes)
// as a 4-d tensor map (D innermost), in boxes of box_cols columns by
// box_rows rows, stored with the 128-byte swizzle.
CUresult EncodeTmaMap4d(tma::TmaMap* m, const void* base, CUtensorMapDataType type, int elem, int d, int64_t t,
                    int64_t heads, int64_t batch, const TensorStrides& st, int box_cols, int box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0) return CUDA_ERROR_NOT_SUPPORTED;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(t),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(st.r) * elem, static_cast<cuuint64_t>(st.h) * elem,
                                 static_cast<cuuint64_t>(st.b) * elem};
  for (cuuint64_t s : strides)
    if (s % 16 != 0 || s >= (cuuint64_t{1} << 40)) return CUDA_ERROR_NOT_SUPPORTED;
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode(&m->map, type, 4, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// A bf16 or f16 operand, in boxes of 64 columns (128 bytes) by box_rows.
CUresult EncodeTmaMap(tma::TmaMap* m, const void* base, bool bf16, int d, int64_t t, int64_t heads, int64_t batch,
                  const TensorStrides& st, int box_rows) {
  return EncodeTmaMap4d(m, base, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, d, t,
                        heads, batch, st, 64, box_rows);
}

// A flat f32 array of n elements as a 1-d tensor map, read in unswizzled
// boxes of `box` elements. (The stride array has no entry a rank-1 map
// reads; it is passed non-null all the same.)
CUresult EncodeTmaMap1d(tma::TmaMap* m, const float* base, int64_t n, int box) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || n < 1 || n >= (int64_t{1} << 31))
    return CUDA_ERROR_NOT_SUPPORTED;
  const cuuint64_t dims[1] = {static_cast<cuuint64_t>(n)}, strides[1] = {static_cast<cuuint64_t>(n) * 4};
  const cuuint32_t boxes[1] = {static_cast<cuuint32_t>(box)}, elem_strides[1] = {1};
  return encode(&m->map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, const_cast<float*>(base), dims, strides, boxes,
                elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// The first map refused while encoding a kernel's maps: its name and the
// driver's result (CUDA_SUCCESS: none).
struct MapFailure {
  const char* name = nullptr;
  CUresult result = CUDA_SUCCESS;
  bool Note(const char* n, CUresult r) {
    if (r != CUDA_SUCCESS && name == nullptr) name = n, result = r;
    return r == CUDA_SUCCESS;
  }
};

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

template <int D, int NWG, bool kBf16, bool kCausal, bool kAtomicDq>
cudaError_t LaunchBwd(const FlashWsBwdParams& w, cudaStream_t s) {
  using L = WsBwdLayoutOf<D, NWG, kAtomicDq>;
  static bool configured = false;  // per instantiation, first launch
  const FlashParams& p = w.p;
  return LaunchWs(FlashBwdWsKernel<D, NWG, kBf16, kCausal, kAtomicDq>, L::kSmemBytes, &configured,
                  (p.seq_k + L::kBN - 1) / L::kBN, p.kv_heads, p.batch, NWG, w, s);
}

template <int D, int NWG, bool kAtomicDq = false>
cudaError_t DispatchBwd(const FlashWsBwdParams& w, cudaStream_t s) {
  if (w.p.bf16)
    return w.p.causal ? LaunchBwd<D, NWG, true, true, kAtomicDq>(w, s) : LaunchBwd<D, NWG, true, false, kAtomicDq>(w, s);
  return w.p.causal ? LaunchBwd<D, NWG, false, true, kAtomicDq>(w, s) : LaunchBwd<D, NWG, false, false, kAtomicDq>(w, s);
}

// The backward kernels' tensor maps (dq_accum only for the one-pass kernel:
// 32 f32 columns a box); false, with the map refused in *f, when TMA cannot
// address an operand.
bool EncodeBwdMaps(FlashWsBwdParams* w, int kv_rows, bool atomic_dq, MapFailure* f) {
  const FlashParams& p = w->p;
  const bool bf = p.bf16 != 0;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  const TensorStrides acc{static_cast<int64_t>(p.heads) * p.seq_q * p.head_dim,
                          static_cast<int64_t>(p.seq_q) * p.head_dim, p.head_dim};
  return f->Note("k", EncodeTmaMap(&w->k, p.k, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sk, kv_rows)) &&
         f->Note("v", EncodeTmaMap(&w->v, p.v, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sv, kv_rows)) &&
         f->Note("q", EncodeTmaMap(&w->q, p.q, bf, p.head_dim, p.seq_q, p.heads, p.batch, p.sq, kWgBwdBM)) &&
         f->Note("dout",
                 EncodeTmaMap(&w->dout, p.dout, bf, p.head_dim, p.seq_q, p.heads, p.batch, p.sdo, kWgBwdBM)) &&
         f->Note("lse", EncodeTmaMap1d(&w->lse, p.lse, rows, kWsStatBox)) &&
         f->Note("delta", EncodeTmaMap1d(&w->delta, p.delta, rows, kWsStatBox)) &&
         (!atomic_dq || f->Note("dq_accum", EncodeTmaMap4d(&w->dq_accum, p.dq_accum, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                                           4, p.head_dim, p.seq_q, p.heads, p.batch, acc, 32,
                                                           kWgBwdBM)));
}

// The forward kernel's tensor maps (false, with the map refused in *f, when
// TMA cannot address an operand).
bool EncodeFwdMaps(FlashWsParams* w, int warpgroups, MapFailure* f) {
  const FlashParams& p = w->p;
  const bool bf = p.bf16 != 0;
  return f->Note("q", EncodeTmaMap(&w->q, p.q, bf, p.head_dim, p.seq_q, p.heads, p.batch, p.sq, 64 * warpgroups)) &&
         f->Note("k", EncodeTmaMap(&w->k, p.k, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sk, kWgFwdBN)) &&
         f->Note("v", EncodeTmaMap(&w->v, p.v, bf, p.head_dim, p.seq_k, p.kv_heads, p.batch, p.sv, kWgFwdBN));
}

}  // namespace

cudaError_t FlashForwardWs(const FlashParams& p, int warpgroups, int stages, cudaStream_t s) {
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
  if (warpgroups < 1 || warpgroups > 3 || (p.head_dim == 128 && warpgroups != 2)) return cudaErrorInvalidValue;
  if (stages != 2 && (stages != 3 || (p.head_dim == 64 && warpgroups != 1))) return cudaErrorInvalidValue;
  FlashWsParams w;
  w.p = p;
  MapFailure f;
  if (!EncodeFwdMaps(&w, warpgroups, &f)) return cudaErrorNotSupported;
  if (p.head_dim == 128) return stages == 3 ? Dispatch<128, 2, 3>(w, s) : Dispatch<128, 2>(w, s);
  if (stages == 3) return Dispatch<64, 1, 3>(w, s);
  return warpgroups == 1 ? Dispatch<64, 1>(w, s) : warpgroups == 2 ? Dispatch<64, 2>(w, s) : Dispatch<64, 3>(w, s);
}

cudaError_t FlashBackwardWsDkDv(const FlashParams& p, int warpgroups, cudaStream_t s) {
  if ((p.head_dim != 64 && p.head_dim != 128) || (warpgroups != 1 && warpgroups != 2)) return cudaErrorInvalidValue;
  FlashWsBwdParams w;
  w.p = p;
  MapFailure f;
  if (!EncodeBwdMaps(&w, 64 * warpgroups, false, &f)) return cudaErrorNotSupported;
  if (p.head_dim == 64) return warpgroups == 1 ? DispatchBwd<64, 1>(w, s) : DispatchBwd<64, 2>(w, s);
  return warpgroups == 1 ? DispatchBwd<128, 1>(w, s) : DispatchBwd<128, 2>(w, s);
}

cudaError_t FlashBackwardWsAtomicDq(const FlashParams& p, cudaStream_t s) {
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
  static_assert(WsAtomicLayout<64>::kFits && WsAtomicLayout<128>::kFits, "the blocks' shared memory exceeds the SM's");
  FlashWsBwdParams w;
  w.p = p;
  MapFailure f;
  if (!EncodeBwdMaps(&w, p.head_dim, true, &f)) return cudaErrorNotSupported;
  return p.head_dim == 64 ? DispatchBwd<64, 1, true>(w, s) : DispatchBwd<128, 2, true>(w, s);
}

const char* FlashWsMapsCheck(const FlashParams& p, bool backward, int* result) {
  MapFailure f;
  if (backward) {
    FlashWsBwdParams w;
    w.p = p;
    EncodeBwdMaps(&w, p.head_dim, true, &f);
  } else {
    FlashWsParams w;
    w.p = p;
    EncodeFwdMaps(&w, p.head_dim == 128 ? 2 : 1, &f);
  }
  *result = f.result == CUDA_ERROR_NOT_SUPPORTED ? kWsMapNotAddressable : static_cast<int>(f.result);
  return f.name;
}

}  // namespace loom::kernels::cuda::attention
