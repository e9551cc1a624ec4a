// flash_varlen.h: one strided flash call per packed sequence.
#include "kernels/cuda/attention/flash_varlen.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace loom::kernels::cuda::attention {
namespace {

absl::Status Bad(const char* what, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("flash_attention_varlen: ", what, ": ", why));
}

absl::Status CheckOffsets(const char* name, const std::vector<int64_t>& cu) {
  if (cu.size() < 2) return Bad(name, absl::StrCat("needs B + 1 >= 2 offsets, got ", cu.size()));
  if (cu[0] != 0) return Bad(name, absl::StrCat("must start at 0, got ", cu[0]));
  for (size_t i = 1; i < cu.size(); ++i)
    if (cu[i] < cu[i - 1])
      return Bad(name, absl::StrCat("must be nondecreasing: offset ", i, " is ", cu[i], " after ", cu[i - 1]));
  return absl::OkStatus();
}

template <class T>
T* At(T* base, int64_t rows, int64_t heads, int64_t d, DType dt) {
  if (base == nullptr) return nullptr;
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(base) + rows * heads * d * static_cast<int64_t>(DTypeSize(dt)));
}

int64_t Len(const std::vector<int64_t>& cu, int64_t b) { return cu[b + 1] - cu[b]; }

}  // namespace

FlashAttnArgs FlashVarlenSequence(const FlashVarlenArgs& a, int64_t b) {
  FlashAttnArgs f;
  f.dtype = a.dtype;
  f.batch = 1, f.heads = a.heads, f.kv_heads = a.kv_heads, f.head_dim = a.head_dim;
  f.seq_q = Len(a.cu_seqlens_q, b), f.seq_k = Len(a.cu_seqlens_k, b);
  f.causal = a.causal, f.scale = a.scale, f.deterministic = a.deterministic;
  f.fwd_variant = a.fwd_variant, f.bwd_variant = a.bwd_variant, f.dq_variant = a.dq_variant;
  const int64_t H = a.heads, HK = a.kv_heads, D = a.head_dim, q0 = a.cu_seqlens_q[b], k0 = a.cu_seqlens_k[b];
  f.q = At(a.q, q0, H, D, a.dtype), f.o = At(a.o, q0, H, D, a.dtype);
  f.dout = At(a.dout, q0, H, D, a.dtype), f.dq = At(a.dq, q0, H, D, a.dtype);
  f.k = At(a.k, k0, HK, D, a.dtype), f.v = At(a.v, k0, HK, D, a.dtype);
  f.dk = At(a.dk, k0, HK, D, a.dtype), f.dv = At(a.dv, k0, HK, D, a.dtype);
  f.lse = a.lse == nullptr ? nullptr : a.lse + H * q0;
  // Packed [T, heads, D] rows: row stride heads * D, head stride D.
  const FlashStrides sq{f.seq_q * H * D, D, H * D}, sk{f.seq_k * HK * D, D, HK * D};
  f.q_strides = f.o_strides = f.dout_strides = f.dq_strides = sq;
  f.k_strides = f.v_strides = f.dk_strides = f.dv_strides = sk;
  f.workspace = a.workspace;
  f.stream = a.stream;
  return f;
}

absl::Status FlashVarlenValidate(const FlashVarlenArgs& a, bool backward) {
  LOOM_RETURN_IF_ERROR(CheckOffsets("cu_seqlens_q", a.cu_seqlens_q));
  LOOM_RETURN_IF_ERROR(CheckOffsets("cu_seqlens_k", a.cu_seqlens_k));
  if (a.cu_seqlens_q.size() != a.cu_seqlens_k.size())
    return Bad("cu_seqlens_k", absl::StrCat("has ", a.cu_seqlens_k.size() - 1, " sequences, cu_seqlens_q has ",
                                            a.cu_seqlens_q.size() - 1));
  const int64_t B = static_cast<int64_t>(a.cu_seqlens_q.size()) - 1;
  bool any = false;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t lq = Len(a.cu_seqlens_q, b), lk = Len(a.cu_seqlens_k, b);
    if (lq > 0 && lk == 0)
      return Bad("cu_seqlens_k", absl::StrCat("sequence ", b, " has ", lq, " queries and no keys"));
    if (lq == 0) continue;
    any = true;
    FlashAttnArgs f = FlashVarlenSequence(a, b);
    absl::Status s = FlashAttentionValidate(f, backward);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("flash_attention_varlen: sequence ", b, ": ", s.message()));
  }
  if (!any) return Bad("cu_seqlens_q", "every sequence is empty");
  return absl::OkStatus();
}

int64_t FlashVarlenBwdWorkspaceBytes(const FlashVarlenArgs& a) {
  int64_t most = 0;
  for (size_t b = 0; b + 1 < a.cu_seqlens_q.size() && b + 1 < a.cu_seqlens_k.size(); ++b)
    if (Len(a.cu_seqlens_q, b) > 0 && Len(a.cu_seqlens_k, b) > 0)
      most = std::max(most, FlashAttentionBwdWorkspaceBytes(FlashVarlenSequence(a, static_cast<int64_t>(b))));
  return most;
}

absl::Status FlashAttentionVarlenForward(const FlashVarlenArgs& a) {
  LOOM_RETURN_IF_ERROR(FlashVarlenValidate(a, false));
  for (int64_t b = 0; b + 1 < static_cast<int64_t>(a.cu_seqlens_q.size()); ++b)
    if (Len(a.cu_seqlens_q, b) > 0) LOOM_RETURN_IF_ERROR(FlashAttentionForward(FlashVarlenSequence(a, b)));
  return absl::OkStatus();
}

absl::Status FlashAttentionVarlenBackward(const FlashVarlenArgs& a) {
  LOOM_RETURN_IF_ERROR(FlashVarlenValidate(a, true));
  for (int64_t b = 0; b + 1 < static_cast<int64_t>(a.cu_seqlens_q.size()); ++b) {
    const FlashAttnArgs f = FlashVarlenSequence(a, b);
    if (f.seq_q > 0) {
      LOOM_RETURN_IF_ERROR(FlashAttentionBackward(f));
    } else if (f.seq_k > 0) {  // keys nobody attends to: zero gradient
#ifdef LOOM_HAVE_CUDA
      const size_t bytes = static_cast<size_t>(f.seq_k * a.kv_heads * a.head_dim) * DTypeSize(a.dtype);
      cudaStream_t s = static_cast<cudaStream_t>(a.stream);
      for (void* p : {f.dk, f.dv})
        if (cudaMemsetAsync(p, 0, bytes, s) != cudaSuccess)
          return absl::InternalError("flash_attention_varlen: cudaMemsetAsync failed");
#else
      return absl::UnavailableError("Loom was built without CUDA (nvcc not found)");
#endif
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::kernels::cuda::attention
