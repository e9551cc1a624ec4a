// Scaled dot-product attention (PyTorch scaled_dot_product_attention contract).
//
//   out[b,h,t,:] = sum_s P[b,h,t,s] * v[b,h/G,s,:],  G = H / Hkv  (GQA)
//   P = dropout(softmax(scale * q k^T + mask [+ causal]))
//   lse[b,h,t]   = log sum_s exp(scale * q.k + mask)   (f32; -inf for a fully masked row)
//
// Inputs: q[B,H,T,D], k[B,Hkv,S,D], v[B,Hkv,S,Dv], optional mask broadcastable to
// [B,H,T,S]: bool (true = attend) or floating (added to the scores). Attributes:
// is_causal (top-left aligned: key s is visible to query t iff s <= t; may be
// combined with a mask), scale (absent = 1/sqrt(D)), dropout_p in [0,1), seed,
// impl ("auto" | "flash" | "memeff" | "math").
//
// A fully masked row produces out = 0, lse = -inf and zero gradients (PyTorch
// produces NaN there).
//
// Dropout: element (b,h,t,s) is kept iff Philox(seed, 0).Uniform(((b*H+h)*T+t)*S+s)
// >= dropout_p; kept probabilities are scaled by 1/(1-dropout_p). Every
// implementation (and the backward) regenerates the same mask from that counter.
//
// Three implementations, forward and backward:
//   flash  - tiled, online softmax, never materialises T x S; causal skips masked
//            tiles; takes no mask tensor (is_causal only). Backward recomputes P
//            from lse (FlashAttention-2).
//   memeff - one query row block at a time with full-row softmax: O(S) memory per
//            row; takes any mask.
//   math   - the plain reference: materialises scores and P per (b, h).
// SelectSdpaImpl picks one ("auto") or validates an override; an override that
// cannot run is InvalidArgument naming why (never a silent fallback):
//
//   LOOM_ASSIGN_OR_RETURN(SdpaParams p, MakeSdpaParams(metas, attrs));
//   LOOM_ASSIGN_OR_RETURN(SdpaSelection sel, SelectSdpaImpl(p));
//   printf("%s\n", sel.ToString().c_str());   // "sdpa: picked flash because ..."
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/device.h"
#include "base/tensor.h"
#include "kernels/registry.h"

namespace loom::kernels::sdpa {

enum class SdpaImpl { kFlash, kMemEff, kMath };
absl::string_view SdpaImplName(SdpaImpl impl);  // "flash", "memeff", "math"

enum class MaskKind { kNone, kBool, kAdditive };

struct SdpaParams {
  Device device = Device::CPU();
  DType dtype = DType::kF32;
  int64_t B = 0, H = 0, Hkv = 0, T = 0, S = 0, D = 0, Dv = 0;
  MaskKind mask_kind = MaskKind::kNone;
  Shape mask_shape;
  bool is_causal = false;
  double scale = 1.0;  // resolved (1/sqrt(D) when the attribute is absent)
  double dropout_p = 0.0;
  uint64_t seed = 0;
  std::string impl = "auto";
  int64_t group() const { return H / Hkv; }
};

// Validates q, k, v[, mask] metas and the attributes. Errors are InvalidArgument
// naming the input ("k: ...") or attribute ("dropout_p: ...").
absl::StatusOr<SdpaParams> MakeSdpaParams(absl::Span<const kernels::TensorMeta> qkv_mask, const kernels::Attrs& attrs);

struct SdpaSelection {
  SdpaImpl impl = SdpaImpl::kMath;
  std::string reason;
  std::string ToString() const;  // "sdpa: picked flash because <reason>"
};

// OK when `impl` can run `p`, else InvalidArgument saying why.
absl::Status CanRun(SdpaImpl impl, const SdpaParams& p);
// Honors p.impl when it is not "auto" (error if it cannot run), else chooses by
// device, dtype, shapes, mask kind and dropout:
//   non-cpu device       -> Unimplemented (all three are cpu implementations)
//   f64                  -> math (the reference dtype)
//   T*S <= 4096          -> memeff (least overhead on tiny problems)
//   mask tensor          -> memeff (flash takes none)
//   D or Dv > 256        -> memeff (flash limit)
//   otherwise            -> flash (causal and dropout included)
absl::StatusOr<SdpaSelection> SelectSdpaImpl(const SdpaParams& p);

// Direct entry points (host tensors; inputs may be strided views). Outputs must be
// preallocated: out [B,H,T,Dv] of q's dtype and lse [B,H,T] f32 (forward); dq, dk,
// dv like q, k, v (backward). `mask` may be null.
absl::Status SdpaForward(SdpaImpl impl, const SdpaParams& p, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor* mask, Tensor& out, Tensor& lse);
absl::Status SdpaBackward(SdpaImpl impl, const SdpaParams& p, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const Tensor* mask, Tensor& dq, Tensor& dk, Tensor& dv);

// Convenience: validate, select (or honor attrs["impl"]), allocate and run.
// `selection`, when non-null, receives the choice.
absl::StatusOr<std::vector<Tensor>> Sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                                         const kernels::Attrs& attrs, SdpaSelection* selection = nullptr);
absl::StatusOr<std::vector<Tensor>> SdpaGrad(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& lse, const Tensor* mask,
                                             const kernels::Attrs& attrs, SdpaSelection* selection = nullptr);

// The implementations keep their scratch buffers (linear in T and S) in a
// process-wide cache between calls; this frees the cached buffers.
void ReleaseSdpaWorkspace();

}  // namespace loom::kernels::sdpa
