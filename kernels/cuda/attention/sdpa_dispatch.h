// The CUDA SDPA dispatcher: PyTorch's scaled_dot_product_attention contract
// over Loom's kernels, with the kernel chosen per shape by timing.
//
//   q [B, H, Tq, D], k/v [B, Hkv, Tk, D] (contiguous; Hkv divides H: GQA),
//   o [B, H, Tq, D], lse [B, H, Tq] f32 (natural log, kept for the backward);
//   causal: PyTorch's is_causal (query i sees keys j <= i, top-left aligned);
//   scale 0 means 1/sqrt(D). An attention mask or dropout_p > 0 is refused with
//   Unimplemented naming the feature (no kernel here takes them).
//
// Candidates for a shape (Candidates()): every compiled flash-kernel variant
// (flash_variants.h) when flash takes the dtype and D (bf16/f16, D 64/128),
// and then cuDNN's fused attention (cudnn_sdpa.h) when libcudnn.so.9 loads
// (LOOM_SDPA_CUDNN=0 leaves it out; its backward sums dQ with atomics, so it is
// no candidate for a `deterministic` backward); otherwise the math fallback
// (sdpa_math.h: f32/bf16/f16, any D <= 256).
// The first call for a shape key (dtype, B, H, Hkv, Tq, Tk, D, causal,
// deterministic, forward or backward) times the candidates on the caller's own
// buffers (CUDA events, the median of a few runs after a warm-up), caches the
// fastest in-process (and in the file named by LOOM_SDPA_CACHE, when set) and
// runs it; later calls run the cached choice. The backward is tuned by
// coordinate descent: the dK/dV variant with the default dQ pass (and the
// atomic-dQ single pass unless `deterministic`), then the dQ variant.
// Choice() always says what runs and why:
//
//   SdpaDispatcher& d = SdpaDispatcher::Global();
//   LOOM_RETURN_IF_ERROR(d.Forward(args));
//   LOG(INFO) << d.Choice(args, /*backward=*/false);
//   // "flash fwd w8 bm128 bn128 mb1: 1.708 ms, fastest of 7 timed (next: fwd
//   //  w4 bm64 bn64 mb2 1.843 ms)"
//
// Tests inject the timer (SdpaDispatcher(timer)) to check the selection logic
// without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/dtype.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::cuda {

struct SdpaArgs {
  DType dtype = DType::kBF16;  // kBF16, kF16 or kF32
  int64_t batch = 0, heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  bool causal = false;
  float scale = 0.f;  // 0: 1/sqrt(head_dim)
  // Unsupported PyTorch features, refused with Unimplemented.
  const void* attn_mask = nullptr;
  float dropout_p = 0.f;
  // Never pick a candidate whose results vary run to run (atomic dQ).
  bool deterministic = false;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  // Backward.
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;  // SdpaBackwardWorkspaceBytes(args) bytes
  StreamHandle stream = nullptr;
};

// Enough for every flash and math backward candidate of this shape (cuDNN's
// plan takes the caching allocator's bytes when this is short).
int64_t SdpaBackwardWorkspaceBytes(const SdpaArgs& a);
// InvalidArgument naming the argument, or Unimplemented naming the feature.
absl::Status SdpaValidate(const SdpaArgs& a, bool backward);

struct SdpaCandidate {
  enum Kind { kFlash, kMath, kCudnn } kind = kFlash;  // cache-file values 0, 1, 2
  int fwd_variant = 0, bwd_variant = 0, dq_variant = 0;  // flash only
  std::string Name(int64_t head_dim, bool backward) const;
};

struct SdpaDecision {
  SdpaCandidate pick;
  double ms = 0;                                             // the pick's time
  std::vector<std::pair<std::string, double>> timings;       // every candidate timed, ms
  std::string reason;                                        // "timed", "only candidate", "cache file"
};

class SdpaDispatcher {
 public:
  // Milliseconds of one run of `c` on `a` (forward or backward), or an error
  // (the candidate is then skipped).
  using Timer = std::function<absl::StatusOr<double>(const SdpaCandidate& c, const SdpaArgs& a, bool backward)>;
  // No timer: CUDA-event timing of the real kernels.
  explicit SdpaDispatcher(Timer timer = nullptr);

  // Process-wide instance (real timing; LOOM_SDPA_CACHE read at first use).
  static SdpaDispatcher& Global();

  absl::Status Forward(const SdpaArgs& a);
  absl::Status Backward(const SdpaArgs& a);

  // The candidates for this shape, in timing order.
  std::vector<SdpaCandidate> Candidates(const SdpaArgs& a, bool backward) const;
  // Tunes (once per shape key) and returns the decision.
  absl::StatusOr<SdpaDecision> Select(const SdpaArgs& a, bool backward);
  // "flash fwd ...: 0.81 ms, fastest of 7 timed (next: ...)", or
  // "<key>: not tuned yet (would time N candidates: ...)".
  std::string Choice(const SdpaArgs& a, bool backward) const;
  static std::string Key(const SdpaArgs& a, bool backward);

  // Cache file: one line per key, "key<TAB>kind fwd bwd dq<TAB>ms".
  absl::Status SaveCache(const std::string& path) const;
  absl::Status LoadCache(const std::string& path);
  int timer_calls() const { return timer_calls_; }

 private:
  absl::StatusOr<double> Time(const SdpaCandidate& c, const SdpaArgs& a, bool backward);
  absl::Status Run(const SdpaCandidate& c, const SdpaArgs& a, bool backward) const;

  Timer timer_;
  mutable std::mutex mu_;
  std::map<std::string, SdpaDecision> cache_;
  std::string cache_file_;
  int timer_calls_ = 0;
};

}  // namespace loom::cuda
