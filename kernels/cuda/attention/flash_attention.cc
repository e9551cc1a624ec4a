// Argument checks for flash_attention.h and the calls into the nvcc-compiled
// launchers (flash_kernels.h). Without the CUDA toolkit the checks still run
// and a valid call answers Unavailable.
#include "kernels/cuda/attention/flash_attention.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/cuda/attention/flash_variants.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/attention/flash_kernels.h"
#endif

namespace loom::kernels::cuda::attention {
namespace {

absl::Status Bad(const char* op, const char* what, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, ": ", why));
}

absl::Status Validate(const char* op, const FlashAttnArgs& a, bool backward) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16)
    return Bad(op, "dtype", absl::StrCat("expected bf16 or f16, got ", DTypeName(a.dtype)));
  struct Dim {
    const char* name;
    int64_t v;
  };
  for (const Dim& d : {Dim{"batch", a.batch}, Dim{"heads", a.heads}, Dim{"kv_heads", a.kv_heads},
                       Dim{"seq_q", a.seq_q}, Dim{"seq_k", a.seq_k}})
    if (d.v <= 0 || d.v > (int64_t{1} << 30)) return Bad(op, d.name, absl::StrCat("must be in [1, 2^30], got ", d.v));
  if (a.batch > 65535) return Bad(op, "batch", absl::StrCat("must be <= 65535, got ", a.batch));
  if (a.heads > 65535) return Bad(op, "heads", absl::StrCat("must be <= 65535, got ", a.heads));
  if (a.heads % a.kv_heads != 0)
    return Bad(op, "kv_heads", absl::StrCat("must divide heads (", a.heads, "), got ", a.kv_heads));
  if (a.head_dim != 64 && a.head_dim != 128)
    return Bad(op, "head_dim", absl::StrCat("expected 64 or 128, got ", a.head_dim));
  if (a.fwd_variant < 0 || a.fwd_variant > attention::kFwdVariants)
    return Bad(op, "fwd_variant", absl::StrCat("must be in [0, ", attention::kFwdVariants, "], got ", a.fwd_variant));
  if (a.bwd_variant < 0 || a.bwd_variant > attention::kBwdVariants)
    return Bad(op, "bwd_variant", absl::StrCat("must be in [0, ", attention::kBwdVariants, "], got ", a.bwd_variant));
  if (a.dq_variant < 0 || a.dq_variant > attention::kDqVariants)
    return Bad(op, "dq_variant", absl::StrCat("must be in [0, ", attention::kDqVariants, "], got ", a.dq_variant));
  if (a.ds_limit_bytes < 0) return Bad(op, "ds_limit_bytes", absl::StrCat("must be >= 0, got ", a.ds_limit_bytes));
  if (a.deterministic && attention::IsAtomicDqVariant(a.bwd_variant))
    return Bad(op, "bwd_variant",
               absl::StrCat("variant ", a.bwd_variant, " sums dQ with atomics: not deterministic (deterministic is set)"));
  if (!std::isfinite(a.scale) || a.scale < 0)
    return Bad(op, "scale", absl::StrCat("must be finite and > 0 (0: 1/sqrt(D)), got ", a.scale));
  struct Ptr {
    const char* name;
    const void* p;
  };
  for (const Ptr& p : {Ptr{"q", a.q}, Ptr{"k", a.k}, Ptr{"v", a.v}, Ptr{"o", a.o}})
    if (p.p == nullptr) return Bad(op, p.name, "null");
  if (backward)  // a forward's lse may be null (inference); the backward reads it
    for (const Ptr& p : {Ptr{"lse", static_cast<const void*>(a.lse)}, Ptr{"dout", a.dout}, Ptr{"dq", a.dq},
                         Ptr{"dk", a.dk}, Ptr{"dv", a.dv}, Ptr{"workspace", a.workspace}})
      if (p.p == nullptr) return Bad(op, p.name, "null");
  // Layouts: rows start 16-byte aligned (cp.async and vector stores).
  struct Operand {
    const char* name;
    const char* strides;
    const void* p;
    const FlashStrides& s;
  };
  const Operand fwd_ops[] = {{"q", "q_strides", a.q, a.q_strides},
                             {"k", "k_strides", a.k, a.k_strides},
                             {"v", "v_strides", a.v, a.v_strides},
                             {"o", "o_strides", a.o, a.o_strides}};
  const Operand bwd_ops[] = {{"dout", "dout_strides", a.dout, a.dout_strides},
                             {"dq", "dq_strides", a.dq, a.dq_strides},
                             {"dk", "dk_strides", a.dk, a.dk_strides},
                             {"dv", "dv_strides", a.dv, a.dv_strides}};
  for (int part = 0; part < (backward ? 2 : 1); ++part)
    for (const Operand& o : part == 0 ? fwd_ops : bwd_ops) {
      if (reinterpret_cast<uintptr_t>(o.p) % 16 != 0)
        return Bad(op, o.name, "must be 16-byte aligned (cp.async and vector accesses)");
      struct One {
        const char* what;
        int64_t v;
      };
      for (const One& x : {One{"batch", o.s.batch}, One{"head", o.s.head}, One{"row", o.s.row}}) {
        if (x.v < 0 || x.v % 8 != 0)
          return Bad(op, o.strides,
                     absl::StrCat(x.what, " stride must be a non-negative multiple of 8 elements (16-byte aligned "
                                  "rows), got ", x.v));
      }
      if (o.s.row != 0 && o.s.row < a.head_dim)
        return Bad(op, o.strides, absl::StrCat("row stride must be >= head_dim (", a.head_dim, "), got ", o.s.row));
    }
  if (reinterpret_cast<uintptr_t>(a.lse) % 4 != 0) return Bad(op, "lse", "must be 4-byte aligned");
  return absl::OkStatus();
}

float Scale(const FlashAttnArgs& a) {
  return a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
}

int64_t Rows(const FlashAttnArgs& a) { return a.batch * a.heads * a.seq_q; }

// Whether the backward runs the stored-dS variant.
bool UsesDs(const FlashAttnArgs& a) { return attention::IsDsVariant(FlashResolvedBackwardVariant(a)); }
// The f32 dQ accumulator and delta, rounded up to 256 bytes (the dS area follows).
int64_t BaseWorkspaceBytes(const FlashAttnArgs& a) {
  return (Rows(a) * (a.head_dim + 1) * static_cast<int64_t>(sizeof(float)) + 255) / 256 * 256;
}

#ifdef LOOM_HAVE_CUDA
absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorString(e));
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

attention::FlashParams Params(const FlashAttnArgs& a) {
  attention::FlashParams p;
  p.bf16 = a.dtype == DType::kBF16 ? 1 : 0;
  p.batch = static_cast<int>(a.batch), p.heads = static_cast<int>(a.heads);
  p.kv_heads = static_cast<int>(a.kv_heads);
  p.seq_q = static_cast<int>(a.seq_q), p.seq_k = static_cast<int>(a.seq_k);
  p.head_dim = static_cast<int>(a.head_dim);
  p.causal = a.causal ? 1 : 0;
  p.deterministic = a.deterministic ? 1 : 0;
  p.fwd_variant = a.fwd_variant, p.bwd_variant = FlashResolvedBackwardVariant(a), p.dq_variant = a.dq_variant;
  p.scale = Scale(a);
  p.q = a.q, p.k = a.k, p.v = a.v, p.o = a.o, p.lse = a.lse;
  p.dout = a.dout, p.dq = a.dq, p.dk = a.dk, p.dv = a.dv;
  auto st = [](const FlashStrides& s) { return attention::TensorStrides{s.batch, s.head, s.row}; };
  p.sq = st(a.q_strides), p.sk = st(a.k_strides), p.sv = st(a.v_strides), p.so = st(a.o_strides);
  p.sdo = st(a.dout_strides), p.sdq = st(a.dq_strides), p.sdk = st(a.dk_strides), p.sdv = st(a.dv_strides);
  attention::ResolveDefaultStrides(&p);
  if (a.workspace != nullptr) {
    p.dq_accum = static_cast<float*>(a.workspace);
    p.delta = p.dq_accum + Rows(a) * a.head_dim;
    if (UsesDs(a)) {
      p.ds = static_cast<char*>(a.workspace) + BaseWorkspaceBytes(a);
      p.ds_keys = static_cast<int>(attention::DsKeys(a.seq_k));
      p.ds_ld = attention::DsQueries(a.seq_q);
      p.ds_bh = p.ds_keys * p.ds_ld;
    }
  }
  return p;
}
#endif

}  // namespace

static_assert(kFlashBwdAtomicVariant == attention::kBwdAtomicVariant &&
                  kFlashBwdWsAtomicVariant == attention::kBwdWsAtomicVariant,
              "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashBwdDsVariant == attention::kBwdDsVariant, "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashBwdWgmmaDsVariant == attention::kBwdWgmmaDsVariant,
              "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashBwdWsDsVariant == attention::kBwdWsDsVariant &&
                  kFlashBwdWsDs1Variant == attention::kBwdWsDs1Variant,
              "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashBwdWgmmaDs1Variant == attention::kBwdWgmmaDs1Variant,
              "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashFwdWgmmaPipe1Variant == attention::kFwdWgmmaPipe1Variant,
              "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashFwdWgmmaVariant == attention::kFwdWgmmaVariant, "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashFwdWsVariant == attention::kFwdWsVariant && kFlashFwdWs3Variant == attention::kFwdWs3Variant &&
                  kFlashFwdWs1Variant == attention::kFwdWs1Variant &&
                  kFlashFwdWsSt3Variant == attention::kFwdWsSt3Variant,
              "flash_attention.h and flash_variants.h disagree");
static_assert(kFlashFwdWgmmaPipeVariant == attention::kFwdWgmmaPipeVariant,
              "flash_attention.h and flash_variants.h disagree");

int FlashForwardVariants() { return attention::kFwdVariants; }
int FlashBackwardVariants() { return attention::kBwdVariants; }
int FlashDqVariants() { return attention::kDqVariants; }
int FlashDefaultForwardVariant(int64_t head_dim) { return attention::FwdDefaultVariant(static_cast<int>(head_dim)); }
int FlashDefaultBackwardVariant(int64_t head_dim) { return attention::BwdDefaultVariant(static_cast<int>(head_dim)); }
int FlashDefaultDqVariant(int64_t head_dim) { return attention::DqDefaultVariant(static_cast<int>(head_dim)); }

std::string FlashForwardVariantName(int v, int64_t head_dim) {
  if (v == 0) v = FlashDefaultForwardVariant(head_dim);
  if (v == attention::kFwdWgmmaVariant) return "fwd wgmma wg2 bm128 bn128";
  if (v == attention::kFwdWgmmaPipeVariant) return "fwd wgmma-pipelined wg2 bm128 bn128";
  if (v == attention::kFwdWgmmaPipe1Variant) return "fwd wgmma-pipelined wg1 bm64 bn128";
  if (attention::IsWsFwdVariant(v)) {
    const int wgs = attention::WsWarpgroups(v, static_cast<int>(head_dim));
    return absl::StrCat("fwd warp-specialised tma wg", wgs, " bm", 64 * wgs, " bn128", wgs == 1 ? " mb2" : "",
                        attention::WsStages(v) == 3 ? " st3" : "");
  }
  switch (v) {
#define LOOM_FWD_NAME(id, nw, bn, mb, mw) \
  case id:                                \
    return absl::StrCat("fwd w", nw, " bm", 16 * mw * nw, " bn", bn, " mb", mb);
    LOOM_FWD_VARIANTS(LOOM_FWD_NAME)
#undef LOOM_FWD_NAME
  }
  return absl::StrCat("fwd ?", v);
}

std::string FlashBackwardVariantName(int bv, int qv, int64_t head_dim) {
  if (bv == 0) bv = FlashDefaultBackwardVariant(head_dim);
  if (qv == 0) qv = FlashDefaultDqVariant(head_dim);
  if (bv == attention::kBwdDsVariant) return "bwd stored-ds w4 bn64 bm64 + dq-from-ds w4 bm128";
  if (bv == attention::kBwdWgmmaDsVariant) return "bwd stored-ds wgmma wg2 bn128 bm64 + dq-from-ds w4 bm128";
  if (bv == attention::kBwdWgmmaDs1Variant) return "bwd stored-ds wgmma wg1 bn64 bm64 + dq-from-ds w4 bm128";
  if (bv == attention::kBwdWsDsVariant)
    return "bwd stored-ds warp-specialised tma wg2 bn128 bm64 + dq-from-ds w4 bm128";
  if (bv == attention::kBwdWsDs1Variant)
    return "bwd stored-ds warp-specialised tma wg1 bn64 bm64 mb2 + dq-from-ds w4 bm128";
  if (bv == attention::kBwdWsAtomicVariant)
    return absl::StrCat("bwd one-pass warp-specialised tma wg", head_dim / 64, " bn", head_dim, " bm64 + dq tensor-reduce");
  if (bv == attention::kBwdAtomicVariant)
    return absl::StrCat("bwd atomic-dq w", LOOM_BWD_ATOMIC_NW, " bn", 16 * LOOM_BWD_ATOMIC_NW, " bm",
                        LOOM_BWD_ATOMIC_BM);
  std::string s = absl::StrCat("bwd ?", bv);
  switch (bv) {
#define LOOM_BWD_NAME(id, nw, bm, mb)                                        \
  case id:                                                                   \
    s = absl::StrCat("bwd w", nw, " bn", 16 * nw, " bm", bm, " mb", mb); \
    break;
    LOOM_BWD_VARIANTS(LOOM_BWD_NAME)
#undef LOOM_BWD_NAME
  }
  switch (qv) {
#define LOOM_DQ_NAME(id, nw, bn, mb) \
  case id:                           \
    return absl::StrCat(s, " + dq w", nw, " bm", 16 * nw, " bn", bn, " mb", mb);
    LOOM_DQ_VARIANTS(LOOM_DQ_NAME)
#undef LOOM_DQ_NAME
  }
  return absl::StrCat(s, " + dq ?", qv);
}

int64_t FlashAttentionBwdWorkspaceBytes(const FlashAttnArgs& a) {
  return BaseWorkspaceBytes(a) + (UsesDs(a) ? FlashDsWorkspaceBytes(a) : 0);
}

int FlashResolvedBackwardVariant(const FlashAttnArgs& a) {
  if (a.bwd_variant > 0) return a.bwd_variant;
  return FlashDsWorkspaceBytes(a) <= a.ds_limit_bytes ? attention::kBwdWsDs1Variant
                                                      : attention::BwdDefaultVariant(static_cast<int>(a.head_dim));
}

int64_t FlashDsWorkspaceBytes(const FlashAttnArgs& a) {
  return a.batch * a.heads * attention::DsKeys(a.seq_k) * attention::DsQueries(a.seq_q) * 2;
}

double FlashAttentionForwardFlops(const FlashAttnArgs& a) {
  double f = 4.0 * a.batch * a.heads * static_cast<double>(a.seq_q) * a.seq_k * a.head_dim;
  return a.causal && a.seq_q == a.seq_k ? f / 2 : f;
}

absl::Status FlashAttentionValidate(const FlashAttnArgs& a, bool backward) {
  return Validate(backward ? "flash_attention_backward" : "flash_attention", a, backward);
}

absl::Status FlashAttentionForward(const FlashAttnArgs& a) {
  LOOM_RETURN_IF_ERROR(Validate("flash_attention", a, false));
#ifdef LOOM_HAVE_CUDA
  return CudaStatus(attention::FlashForward(Params(a), static_cast<cudaStream_t>(a.stream)), "flash_attention forward");
#else
  return absl::UnavailableError("Loom was built without CUDA (nvcc not found)");
#endif
}

absl::Status FlashWsMapsStatus(const FlashAttnArgs& a, bool backward) {
  LOOM_RETURN_IF_ERROR(Validate(backward ? "flash_attention_backward" : "flash_attention", a, backward));
#ifdef LOOM_HAVE_CUDA
  if (!attention::DeviceIsSm90()) return absl::UnavailableError("not a compute-capability-9.0 device");
  int result = 0;
  const char* map = attention::FlashWsMapsCheck(Params(a), backward, &result);
  if (map == nullptr) return absl::OkStatus();
  const std::string what = absl::StrCat("flash_attention", backward ? "_backward" : "", ": tensor map '", map, "' ");
  if (result == attention::kWsMapNotAddressable)  // alignment or size: the documented fallback
    return absl::FailedPreconditionError(
        absl::StrCat(what, "not addressable by TMA: the warp-specialised kernels fall back"));
  return absl::InternalError(absl::StrCat(what, "refused by the driver (CUresult ", result, ")"));
#else
  return absl::UnavailableError("Loom was built without CUDA (nvcc not found)");
#endif
}

absl::Status FlashAttentionBackward(const FlashAttnArgs& a) {
  LOOM_RETURN_IF_ERROR(Validate("flash_attention_backward", a, true));
#ifdef LOOM_HAVE_CUDA
  return CudaStatus(attention::FlashBackward(Params(a), static_cast<cudaStream_t>(a.stream)),
                    "flash_attention backward");
#else
  return absl::UnavailableError("Loom was built without CUDA (nvcc not found)");
#endif
}

}  // namespace loom::kernels::cuda::attention
