// Internal: the SDPA dispatcher's memory-efficient fallback kernels
// (sdpa_math.cu) for what the flash kernels do not take: any head_dim up to
// 256, f32/bf16/f16, causal (top-left) or not, GQA, an attention mask (boolean
// or additive, broadcast over [B, H, Tq, Tk]) and dropout (sdpa_dropout.h).
// Plain CUDA-core arithmetic in f32 (accurate expf/logf), one warp per row,
// O(T) memory (no score matrix): correct everywhere, slow (O(Tq Tk D) per
// warp, no tiling). The backward takes no atomics (a dQ pass over queries, a
// dK/dV pass over keys): results are bit-identical run to run.
// A row whose keys are all masked out gives o = 0 and lse = -inf (as Loom's CPU
// sdpa op; PyTorch 2.5+ returns o = 0 there too), and gradient 0. Only
// sdpa_dispatch.cc calls these, after validating the arguments; no Loom or
// Abseil header here so that nvcc needs nothing else.
// Layouts as flash_kernels.h: q/o/do/dq [B,H,Tq,D], k/v/dk/dv [B,Hkv,Tk,D],
// lse [B,H,Tq] f32 (natural log; a forward with lse null writes o alone). The backward needs the forward's o and lse and
// MathBwdWorkspaceFloats() f32 of workspace (delta, one per query row).
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(LOOM_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace loom::kernels::cuda::attention {

struct MathParams {
  int dtype = 0;  // 0 f32, 1 bf16, 2 f16
  int batch = 0, heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  int causal = 0;
  float scale = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* workspace = nullptr;
  // attn_mask at element (b, h, i, j): mask + b*mask_sb + h*mask_sh + i*mask_sq
  // + j*mask_sk (0 strides broadcast). Kinds: 0 none, 1 bool (true: attend),
  // 2/3/4 additive f32/bf16/f16 (added to the scaled scores; -inf masks out).
  int mask_kind = 0;
  const void* mask = nullptr;
  int64_t mask_sb = 0, mask_sh = 0, mask_sq = 0, mask_sk = 0;
  // Dropout on the probabilities (sdpa_dropout.h), p in [0, 1).
  float dropout_p = 0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

constexpr int kMathMaxHeadDim = 256;

inline int64_t MathBwdWorkspaceFloats(const MathParams& p) {
  return static_cast<int64_t>(p.batch) * p.heads * p.seq_q;
}

#if defined(__CUDACC__) || defined(LOOM_HAVE_CUDA)
cudaError_t MathForward(const MathParams& p, cudaStream_t s);
cudaError_t MathBackward(const MathParams& p, cudaStream_t s);
#endif

}  // namespace loom::kernels::cuda::attention
