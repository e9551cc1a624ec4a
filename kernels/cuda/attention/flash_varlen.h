// Variable-length (packed) flash attention: a batch of sequences of different
// lengths stored back to back with no padding, as FlashAttention's varlen API.
//
//   q, o, dout, dq: [total_q, H, D]     k, v, dk, dv: [total_k, Hkv, D]
//   cu_seqlens_q / cu_seqlens_k: host, B + 1 offsets, 0 first, nondecreasing;
//   sequence b is rows [cu_q[b], cu_q[b+1]) of q and [cu_k[b], cu_k[b+1]) of k/v.
//   lse: f32, sequence b's [H, len_q(b)] block at offset H * cu_q[b] (contiguous);
//   null in an inference forward (not written).
//
// Each sequence is one strided flash call (flash_attention.h: row stride H*D,
// head stride D) on `stream`, so no work is spent on padding; sequences of
// length 0 are skipped (their dk/dv rows are zeroed). causal is top-left per
// sequence. The backward reuses one workspace of FlashVarlenBwdWorkspaceBytes
// for every sequence (the calls are stream-ordered). dtype, head_dim, scale,
// deterministic and the variants mean what they mean in FlashAttnArgs.
//
//   FlashVarlenArgs a;  a.heads = a.kv_heads = 16;  a.head_dim = 128;
//   a.cu_seqlens_q = a.cu_seqlens_k = {0, 300, 1324, 1500};
//   a.q = ...; a.o = ...; a.lse = ...;
//   LOOM_RETURN_IF_ERROR(FlashAttentionVarlenForward(a));
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/attention/flash_attention.h"

namespace loom::kernels::cuda::attention {

struct FlashVarlenArgs {
  DType dtype = DType::kBF16;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  float scale = 0.f;
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;  // FlashVarlenBwdWorkspaceBytes(args)
  bool deterministic = false;
  int fwd_variant = 0, bwd_variant = 0, dq_variant = 0;
  StreamHandle stream = nullptr;
};

// InvalidArgument naming the field (cu_seqlens_q/k malformed or of different
// batch sizes, or a per-sequence argument flash refuses).
absl::Status FlashVarlenValidate(const FlashVarlenArgs& a, bool backward);
int64_t FlashVarlenBwdWorkspaceBytes(const FlashVarlenArgs& a);
absl::Status FlashAttentionVarlenForward(const FlashVarlenArgs& a);
absl::Status FlashAttentionVarlenBackward(const FlashVarlenArgs& a);

// The per-sequence flash call (sequence b; lengths must be > 0); exposed for tests.
FlashAttnArgs FlashVarlenSequence(const FlashVarlenArgs& a, int64_t b);

}  // namespace loom::kernels::cuda::attention
