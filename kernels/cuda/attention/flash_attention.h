// Loom's flash-attention kernels for sm_90: scaled dot-product attention,
// forward and backward, over raw device pointers (bf16 or f16, f32 softmax).
//
//   q, o, dout, dq: [B, H, Tq, D]    k, v, dk, dv: [B, Hkv, Tk, D]
//   lse: [B, H, Tq] f32, the natural-log logsumexp of each row of scale * q k^T;
//   null in a forward that no backward follows (inference): o alone is written
//   Each of the eight tensors takes its own batch, head and row element
//   strides (FlashStrides; D stays contiguous, 0 = the contiguous [B, H, T, D]
//   stride), so q/k/v can be windows of one [B, T, 3, H, D] qkv buffer and o
//   can be written in [B, T, H, D] order. Strides must be multiples of 8
//   elements and pointers 16-byte aligned (cp.async / vector accesses), row
//   strides >= D. lse and the workspace are always contiguous.
//   o = softmax(scale * q k^T [+ causal mask]) v,  query head h uses kv head
//   h / (H / Hkv) (GQA; Hkv must divide H).
//
// causal follows PyTorch's is_causal: query i sees keys j <= i (top-left
// aligned when Tq != Tk). D is 64 or 128. scale 0 means 1/sqrt(D); otherwise it
// must be finite and > 0. Tq and Tk need not be multiples of any tile.
// Attention masks and dropout are not handled here (the SDPA dispatcher routes
// those to other kernels).
//
//   FlashAttnArgs a; a.dtype = DType::kBF16; a.batch = 4; a.heads = a.kv_heads = 16;
//   a.seq_q = a.seq_k = 4096; a.head_dim = 128; a.q = ...; a.o = ...; a.lse = ...;
//   LOOM_RETURN_IF_ERROR(FlashAttentionForward(a));
//   // backward: a.dout, a.dq, a.dk, a.dv and FlashAttentionBwdWorkspaceBytes(a)
//   // bytes of device workspace; o and lse are the forward's.
//   LOOM_RETURN_IF_ERROR(FlashAttentionBackward(a));
//
// Every call validates its arguments first (InvalidArgument naming the
// argument, also in builds without CUDA), then launches asynchronously on
// `stream` and returns the launch error. By default the backward is
// deterministic: dK/dV, with dS stored to the workspace while that takes at
// most FlashAttnArgs::ds_limit_bytes, then dQ from it (else dQ by its own pass); the variant
// fields pick among the compiled kernel configurations (flash_variants.h),
// which the SDPA dispatcher (sdpa_dispatch.h) times per shape. Only
// bwd_variant == kFlashBwdAtomicVariant and kFlashBwdWsAtomicVariant sum dQ
// with f32 atomics (last bits vary between runs; refused when
// `deterministic` is set).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::kernels::cuda::attention {

// Element strides of one [B, heads, T, D] tensor; 0 = contiguous.
struct FlashStrides {
  int64_t batch = 0, head = 0, row = 0;
};

// FlashAttnArgs::ds_limit_bytes by default: 8 GiB (B H Tq Tk bf16 elements of
// dS: B4 H16 T4096 takes 2.1 GB, B2 H16 T8192 4.3 GB).
inline constexpr int64_t kFlashDefaultDsLimitBytes = int64_t{8} << 30;

struct FlashAttnArgs {
  DType dtype = DType::kBF16;  // kBF16 or kF16
  int64_t batch = 0, heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  bool causal = false;
  float scale = 0.f;  // 0: 1/sqrt(head_dim)
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // forward: may be null (inference, no lse written)
  // Backward.
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;  // FlashAttentionBwdWorkspaceBytes(args) bytes
  FlashStrides q_strides, k_strides, v_strides, o_strides;
  FlashStrides dout_strides, dq_strides, dk_strides, dv_strides;  // backward
  // Refuse the atomic-dQ backward variant (every other variant is
  // bit-identical across runs).
  bool deterministic = false;
  // Kernel configurations, 1-based (0: the default for head_dim); ranges
  // [0, FlashForwardVariants()], [0, FlashBackwardVariants()], [0,
  // FlashDqVariants()]. dq_variant is unused by the atomic and stored-dS
  // backward variants.
  int fwd_variant = 0;
  int bwd_variant = 0;
  int dq_variant = 0;
  // The most dS workspace the default backward (bwd_variant 0) takes: the
  // stored-dS backward while FlashDsWorkspaceBytes fits, else the two-pass
  // default (0: never the stored-dS variant by default).
  int64_t ds_limit_bytes = kFlashDefaultDsLimitBytes;
  StreamHandle stream = nullptr;
};

// The argument checks every call runs first (InvalidArgument naming the field).
absl::Status FlashAttentionValidate(const FlashAttnArgs& a, bool backward);
absl::Status FlashAttentionForward(const FlashAttnArgs& a);
// f32 dQ accumulator and delta = rowsum(dO * O) (and dS for the stored-dS variant).
int64_t FlashAttentionBwdWorkspaceBytes(const FlashAttnArgs& a);
// The dS part of the stored-dS variant's workspace (whatever a.bwd_variant is).
int64_t FlashDsWorkspaceBytes(const FlashAttnArgs& a);
// The backward variant a call runs: a.bwd_variant, or when 0 the stored-dS
// backward with the warp-specialised one-warpgroup dK/dV pass
// (kFlashBwdWsDs1Variant; the wgmma pass where TMA cannot address an
// operand, mma.sync's off compute capability 9.0) if FlashDsWorkspaceBytes(a)
// <= a.ds_limit_bytes, else the two-pass default for the head dim.
int FlashResolvedBackwardVariant(const FlashAttnArgs& a);
absl::Status FlashAttentionBackward(const FlashAttnArgs& a);

int FlashForwardVariants();
int FlashBackwardVariants();
int FlashDqVariants();
inline constexpr int kFlashBwdAtomicVariant = 6;
// The warp-specialised one-pass backward (Hopper, TMA): dQ added into the f32
// accumulator by tensor reduces, no dS workspace; last bits vary as
// kFlashBwdAtomicVariant's (which runs instead off compute capability 9.0).
inline constexpr int kFlashBwdWsAtomicVariant = 12;
// Whether a backward variant sums dQ with atomics (refused when deterministic).
inline constexpr bool FlashBwdAtomicDq(int v) { return v == kFlashBwdAtomicVariant || v == kFlashBwdWsAtomicVariant; }
// The stored-dS backward: deterministic, 5 matrix products, and a workspace of
// FlashDsWorkspaceBytes more (B H Tq Tk elements: dS).
inline constexpr int kFlashBwdDsVariant = 7;
// The stored-dS backward with its dK/dV pass on Hopper's wgmma (compute
// capability 9.0; elsewhere it runs kFlashBwdDsVariant's): same workspace.
inline constexpr int kFlashBwdWgmmaDsVariant = 8;
inline constexpr int kFlashBwdWgmmaDs1Variant = 9;  // one warpgroup (64 keys) per block
// The same with the warp-specialised dK/dV pass (a TMA producer warpgroup;
// compute capability 9.0): two consumer warpgroups, or one.
inline constexpr int kFlashBwdWsDsVariant = 10;
inline constexpr int kFlashBwdWsDs1Variant = 11;
inline constexpr bool FlashBwdUsesDs(int v) { return v >= kFlashBwdDsVariant && v <= kFlashBwdWsDs1Variant; }
// The wgmma forward (Hopper warpgroup products; on a device other than
// compute capability 9.0 it runs the mma.sync default instead).
inline constexpr int kFlashFwdWgmmaVariant = 8;
inline constexpr int kFlashFwdWgmmaPipeVariant = 9;   // pipelined schedule
inline constexpr int kFlashFwdWgmmaPipe1Variant = 10; // pipelined, one warpgroup per block
inline constexpr int kFlashFwdWsVariant = 11;          // warp-specialised: TMA producer, two consumer warpgroups
inline constexpr int kFlashFwdWs3Variant = 12;         // the same with three consumers (two at D 128)
inline constexpr int kFlashFwdWs1Variant = 13;         // one consumer, two blocks per SM (two consumers at D 128)
inline constexpr int kFlashFwdWsSt3Variant = 14;       // a ring of three K/V stages (one consumer at D 64, two at 128)
// The variant a 0 resolves to for this head_dim, and readable descriptions,
// e.g. "fwd w8 bn64 mb1", "bwd w4 bm32 mb1 + dq w4 bn64 mb1", "bwd atomic-dq ...",
// "bwd stored-ds ...".
int FlashDefaultForwardVariant(int64_t head_dim);
int FlashDefaultBackwardVariant(int64_t head_dim);
int FlashDefaultDqVariant(int64_t head_dim);
std::string FlashForwardVariantName(int fwd_variant, int64_t head_dim);
std::string FlashBackwardVariantName(int bwd_variant, int dq_variant, int64_t head_dim);

// Whether the warp-specialised (TMA) kernels can take this call's operands,
// the forward's (backward false) or the backward's, rather than fall back to
// the wgmma kernels: OK; FailedPrecondition naming the tensor map TMA cannot
// address (an operand not on 16 bytes, or strides not in 16-byte units: the
// documented fallback);
// Internal when the driver refuses a map that should encode. Unavailable
// without CUDA or off compute capability 9.0. attention_check asserts it for
// every case that asks for those kernels, so a fallback cannot pass as them.
absl::Status FlashWsMapsStatus(const FlashAttnArgs& a, bool backward);

// The forward's FLOPs (4 B H Tq Tk D, halved when causal and Tq == Tk).
double FlashAttentionForwardFlops(const FlashAttnArgs& a);

}  // namespace loom::kernels::cuda::attention
