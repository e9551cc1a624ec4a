// cuDNN's fused attention (flash-style SDPA engines of cuDNN 9) as a Loom SDPA
// kernel, through the cuDNN backend graph API. libcudnn.so.9 is loaded at run
// time (dlopen; LOOM_CUDNN_LIB names another file), so binaries build and run
// without cuDNN and report Unavailable("cuDNN not found: ...").
//
//   q, o, dout, dq: [B, H, Tq, D]   k, v, dk, dv: [B, Hkv, Tk, D]   (bf16 or f16)
//   lse: [B, H, Tq] f32 contiguous, natural-log logsumexp of scale * q k^T rows;
//   null in an inference forward (its own plan: the stats tensor virtual)
//   o = softmax(scale * q k^T [+ causal mask]) v; query head h uses kv head
//   h / (H / Hkv) (GQA). causal: query i sees keys j <= i (top-left aligned).
//   scale 0 means 1/sqrt(D). D: a multiple of 8 up to 128 (64 and 128 tested).
//
// Every tensor but lse may be strided: per tensor, the element strides of the
// batch, head and row dimensions (the last dimension is unit-stride); all 0
// means contiguous [B, H, T, D]. The forward graph is matmul(Q, K^T) -> scale ->
// causal mask (row >= col, else lowest float) -> softmax with stats (without,
// when lse is null) -> matmul with V; the backward recomputes P from the stats and gives dQ (summed into an
// f32 accumulator: NOT bit-deterministic run to run), dK, dV (GQA: summed over
// the query heads of each kv head).
//
// One plan per shape key (dtype, dims, strides, causal), built on the first
// call (operation graph -> heuristics -> up to CudnnSdpaOptions::
// max_engine_configs (4) engine configs that finalize) and cached for the
// process; the first run outside a
// CUDA graph capture times each config on the caller's buffers and keeps the
// fastest (CudnnSdpaEngineChoice says which). The choice is kept in the
// TuningCache (kernels/cuda/tuning_cache.h) by device, cuDNN version,
// max_engine_configs and shape key; a later process with that file builds
// only the recorded config (when it still finalizes as the same engine, else
// every config, timed again) and runs it untimed. Building a plan may allocate and
// synchronize, so the first call of a shape must not be inside CUDA graph
// stream capture (refused with FailedPrecondition); later calls are: they only
// set the stream (cuDNN before 9.6: memset the dQ accumulator) and launch.
// Workspace: the caller's (workspace, workspace_bytes) when large enough
// (CudnnSdpaWorkspaceBytes), else a block of the device's caching allocator,
// stream-ordered.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::kernels::cuda::attention {

struct CudnnStrides {
  int64_t batch = 0, head = 0, row = 0;  // elements; all 0: contiguous
};

struct CudnnSdpaArgs {
  DType dtype = DType::kBF16;  // kBF16 or kF16
  int64_t batch = 0, heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  bool causal = false;
  float scale = 0.f;  // 0: 1/sqrt(head_dim)
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  CudnnStrides q_strides, k_strides, v_strides, o_strides;
  // Backward.
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  CudnnStrides dout_strides, dq_strides, dk_strides, dv_strides;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  StreamHandle stream = nullptr;
};

// Process-wide settings of the cuDNN path. Set them before the first plan is
// built: plans (and the engine config each one timed) are cached.
struct CudnnSdpaOptions {
  // Engine configs a plan keeps (heuristics mode A, then the fallback list's
  // other engines) and times on its first run outside capture; the fastest
  // runs from then on. 1: the heuristics' first, untimed. In [1, 16].
  int max_engine_configs = 4;
  // Print each plan's engine-config timings to stderr (a debug aid).
  bool verbose = false;
};
// InvalidArgument naming the field when one is out of range.
absl::Status SetCudnnSdpaOptions(const CudnnSdpaOptions& o);
CudnnSdpaOptions GetCudnnSdpaOptions();

// Ok when libcudnn.so.9 loaded and has the backend API; else Unavailable
// ("cuDNN not found: ...", or the build lacks CUDA).
absl::Status CudnnAvailable();
// "9.10.2 (libcudnn.so.9)", or the reason it is unavailable.
std::string CudnnVersionString();

// InvalidArgument naming the field; Unimplemented for what cuDNN's fused
// attention does not take (dtype, head_dim).
absl::Status CudnnSdpaValidate(const CudnnSdpaArgs& a, bool backward);
absl::Status CudnnSdpaForward(const CudnnSdpaArgs& a);
absl::Status CudnnSdpaBackward(const CudnnSdpaArgs& a);
// Device workspace this shape needs (builds and caches the plan).
absl::StatusOr<int64_t> CudnnSdpaWorkspaceBytes(const CudnnSdpaArgs& a, bool backward);

// The engine config that runs this shape and why ("engine 8 (heuristics mode
// 0, config 0), fastest of 3 timed (...)"), or "" before its first run.
std::string CudnnSdpaEngineChoice(const CudnnSdpaArgs& a, bool backward);

// cuDNN's backward sums dQ with atomics into an f32 accumulator: results can
// differ in the last bits between runs.
inline constexpr bool kCudnnSdpaBackwardDeterministic = false;

}  // namespace loom::kernels::cuda::attention
