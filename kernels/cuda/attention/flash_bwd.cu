// Flash-attention backward: launchers (the kernels are in flash_bwd_kernel.cuh).
#include "kernels/cuda/attention/flash_bwd_kernel.cuh"

namespace loom::cuda::attn {
namespace {

template <int D, bool kBf16, bool kCausal>
cudaError_t LaunchBwd(const FlashParams& p, cudaStream_t s) {
  constexpr int BM = BwdCfg<D>::BM;
  const int smem = (2 * kBwdBN * D + 4 * BM * D + kBwdBN * BM) * 2;
  auto kernel = FlashBwdKernel<D, kBf16, kCausal>;
  static bool configured = false;
  if (!configured) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
  BwdPreprocessKernel<kBf16><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(p, rows);
  dim3 grid((p.seq_k + kBwdBN - 1) / kBwdBN, p.kv_heads, p.batch);
  kernel<<<grid, kBwdThreads, smem, s>>>(p);
  if (p.deterministic) {
    const int dq_smem = (2 * kDqBM * D + 4 * kDqBN * D) * 2;
    auto dq_kernel = FlashBwdDqKernel<D, kBf16, kCausal>;
    static bool dq_configured = false;
    if (!dq_configured) {
      cudaError_t e = cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dq_smem);
      if (e != cudaSuccess) return e;
      dq_configured = true;
    }
    dim3 dq_grid((p.seq_q + kDqBM - 1) / kDqBM, p.heads, p.batch);
    dq_kernel<<<dq_grid, kDqThreads, dq_smem, s>>>(p);
    return cudaGetLastError();
  }
  const int64_t n = rows * D;
  const int64_t blocks = (n + 255) / 256;
  BwdConvertDqKernel<kBf16><<<static_cast<unsigned>(blocks < 65536 * 8 ? blocks : 65536 * 8), 256, 0, s>>>(
      p.dq_accum, p.dq, n, p.scale);
  return cudaGetLastError();
}

template <int D, bool kBf16>
cudaError_t Bwd2(const FlashParams& p, cudaStream_t s) {
  return p.causal ? LaunchBwd<D, kBf16, true>(p, s) : LaunchBwd<D, kBf16, false>(p, s);
}
template <int D>
cudaError_t Bwd1(const FlashParams& p, cudaStream_t s) {
  return p.bf16 ? Bwd2<D, true>(p, s) : Bwd2<D, false>(p, s);
}

}  // namespace

cudaError_t FlashBackward(const FlashParams& p, cudaStream_t s) {
  if (p.head_dim == 64) return Bwd1<64>(p, s);
  if (p.head_dim == 128) return Bwd1<128>(p, s);
  return cudaErrorInvalidValue;
}

}  // namespace loom::cuda::attn
