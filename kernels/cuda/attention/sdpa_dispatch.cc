// The CUDA SDPA dispatcher (sdpa_dispatch.h): validation, candidates, the
// per-shape autotuning cache and the runs.
#include "kernels/cuda/attention/sdpa_dispatch.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "kernels/cuda/attention/cudnn_sdpa.h"
#include "kernels/cuda/attention/flash_attention.h"
#include "kernels/cuda/attention/sdpa_math.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/run_timing.h"
#endif

namespace loom::kernels::cuda::attention {
namespace {

absl::Status Bad(const char* what, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("sdpa: ", what, ": ", why));
}

bool FlashTakes(const SdpaArgs& a) {
  return (a.dtype == DType::kBF16 || a.dtype == DType::kF16) && (a.head_dim == 64 || a.head_dim == 128) &&
         a.batch <= 65535 && a.heads <= 65535 && a.attn_mask == nullptr && a.dropout_p == 0.f;
}

// Element strides of a mask of `shape` (contiguous) broadcast over
// [B, H, Tq, Tk], or the dimension that does not broadcast.
absl::StatusOr<std::array<int64_t, 4>> MaskStrides(const SdpaArgs& a) {
  const std::array<int64_t, 4> full = {a.batch, a.heads, a.seq_q, a.seq_k};
  const std::vector<int64_t>& m = a.mask_shape;
  if (m.empty() || m.size() > 4)
    return Bad("mask_shape", absl::StrCat("must have 1 to 4 dims (broadcast to [B, H, Tq, Tk]), got ", m.size()));
  std::array<int64_t, 4> strides = {0, 0, 0, 0};
  int64_t stride = 1;
  for (int i = static_cast<int>(m.size()) - 1, d = 3; i >= 0; --i, --d) {
    if (m[i] != 1 && m[i] != full[d])
      return Bad("mask_shape", absl::StrCat("dim ", i, " is ", m[i], ", which does not broadcast to ", full[d],
                                            " ([B, H, Tq, Tk] = [", a.batch, ", ", a.heads, ", ", a.seq_q, ", ",
                                            a.seq_k, "])"));
    strides[d] = m[i] == 1 ? 0 : stride;
    stride *= m[i];
  }
  return strides;
}

FlashAttnArgs ToFlash(const SdpaCandidate& c, const SdpaArgs& a) {
  FlashAttnArgs f;
  f.dtype = a.dtype;
  f.batch = a.batch, f.heads = a.heads, f.kv_heads = a.kv_heads;
  f.seq_q = a.seq_q, f.seq_k = a.seq_k, f.head_dim = a.head_dim;
  f.causal = a.causal;
  f.scale = a.scale;
  f.deterministic = a.deterministic;
  f.fwd_variant = c.fwd_variant, f.bwd_variant = c.bwd_variant, f.dq_variant = c.dq_variant;
  f.ds_limit_bytes = a.ds_limit_bytes;
  f.q = a.q, f.k = a.k, f.v = a.v, f.o = a.o, f.lse = a.lse;
  f.dout = a.dout, f.dq = a.dq, f.dk = a.dk, f.dv = a.dv, f.workspace = a.workspace;
  f.q_strides = a.q_strides, f.k_strides = a.k_strides, f.v_strides = a.v_strides, f.o_strides = a.o_strides;
  f.dout_strides = a.dout_strides, f.dq_strides = a.dq_strides, f.dk_strides = a.dk_strides;
  f.dv_strides = a.dv_strides;
  f.stream = a.stream;
  return f;
}

CudnnSdpaArgs ToCudnn(const SdpaArgs& a, bool backward) {
  CudnnSdpaArgs c;
  c.dtype = a.dtype;
  c.batch = a.batch, c.heads = a.heads, c.kv_heads = a.kv_heads;
  c.seq_q = a.seq_q, c.seq_k = a.seq_k, c.head_dim = a.head_dim;
  c.causal = a.causal;
  c.scale = a.scale;
  c.q = a.q, c.k = a.k, c.v = a.v, c.o = a.o, c.lse = a.lse;
  c.dout = a.dout, c.dq = a.dq, c.dk = a.dk, c.dv = a.dv;
  c.workspace = a.workspace;
  c.workspace_bytes = a.workspace_bytes >= 0 ? a.workspace_bytes : backward ? SdpaBackwardWorkspaceBytes(a) : 0;
  c.stream = a.stream;
  auto st = [](const FlashStrides& f) { return CudnnStrides{f.batch, f.head, f.row}; };
  c.q_strides = st(a.q_strides), c.k_strides = st(a.k_strides), c.v_strides = st(a.v_strides);
  c.o_strides = st(a.o_strides), c.dout_strides = st(a.dout_strides);
  c.dq_strides = st(a.dq_strides), c.dk_strides = st(a.dk_strides), c.dv_strides = st(a.dv_strides);
  return c;
}

attention::MathParams ToMath(const SdpaArgs& a) {
  attention::MathParams p;
  p.dtype = a.dtype == DType::kF32 ? 0 : a.dtype == DType::kBF16 ? 1 : 2;
  p.batch = static_cast<int>(a.batch), p.heads = static_cast<int>(a.heads);
  p.kv_heads = static_cast<int>(a.kv_heads);
  p.seq_q = static_cast<int>(a.seq_q), p.seq_k = static_cast<int>(a.seq_k);
  p.head_dim = static_cast<int>(a.head_dim);
  p.causal = a.causal ? 1 : 0;
  p.scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  p.q = a.q, p.k = a.k, p.v = a.v, p.o = a.o, p.lse = a.lse;
  p.dout = a.dout, p.dq = a.dq, p.dk = a.dk, p.dv = a.dv;
  p.workspace = static_cast<float*>(a.workspace);
  if (a.attn_mask != nullptr) {
    if (auto st = MaskStrides(a); st.ok()) {  // validated before any run
      p.mask = a.attn_mask;
      p.mask_kind = a.mask_dtype == DType::kBool ? 1 : a.mask_dtype == DType::kF32 ? 2
                    : a.mask_dtype == DType::kBF16 ? 3 : 4;
      p.mask_sb = (*st)[0], p.mask_sh = (*st)[1], p.mask_sq = (*st)[2], p.mask_sk = (*st)[3];
    }
  }
  p.dropout_p = a.dropout_p;
  p.dropout_seed = a.dropout_seed, p.dropout_offset = a.dropout_offset;
  return p;
}

std::string Ms(double ms) { return absl::StrFormat("%.3f ms", ms); }

}  // namespace

bool SdpaArgs::strided() const {
  for (const FlashStrides* s :
       {&q_strides, &k_strides, &v_strides, &o_strides, &dout_strides, &dq_strides, &dk_strides, &dv_strides})
    if (s->batch != 0 || s->head != 0 || s->row != 0) return true;
  return false;
}

namespace {

// The flash arguments that workspace sizes depend on.
FlashAttnArgs ShapeOnly(const SdpaArgs& a, int bwd_variant) {
  FlashAttnArgs f;
  f.batch = a.batch, f.heads = a.heads, f.kv_heads = a.kv_heads;
  f.seq_q = a.seq_q, f.seq_k = a.seq_k, f.head_dim = a.head_dim;
  f.bwd_variant = bwd_variant;
  f.ds_limit_bytes = a.ds_limit_bytes;
  return f;
}

// The stored-dS flash backward needs B H Tq Tk elements of workspace: it is
// a candidate while that is at most a.ds_limit_bytes and the caller's
// workspace holds it.
bool DsFitsLimit(const SdpaArgs& a) {
  return FlashDsWorkspaceBytes(ShapeOnly(a, kFlashBwdDsVariant)) <= a.ds_limit_bytes;
}

}  // namespace

int64_t SdpaBackwardWorkspaceBytes(const SdpaArgs& a) {
  const int64_t math = attention::MathBwdWorkspaceFloats(ToMath(a)) * static_cast<int64_t>(sizeof(float));
  if (!FlashTakes(a)) return math;  // the math kernel is the only candidate
  const FlashAttnArgs f = ShapeOnly(a, DsFitsLimit(a) ? kFlashBwdDsVariant : 0);
  return std::max<int64_t>(FlashAttentionBwdWorkspaceBytes(f), math);
}

int64_t SdpaWorkspaceBytes(const SdpaArgs& a, bool backward) {
  int64_t bytes = backward ? SdpaBackwardWorkspaceBytes(a) : 0;
  const bool cudnn_ok = !backward || !a.deterministic || kCudnnSdpaBackwardDeterministic;
  // A shape whose known pick is not cuDNN (SdpaDispatcher::MayRunCudnn) needs no cuDNN plan.
  if (FlashTakes(a) && cudnn_ok && CudnnAvailable().ok() && SdpaDispatcher::Global().MayRunCudnn(a, backward)) {
    absl::StatusOr<int64_t> c = CudnnSdpaWorkspaceBytes(ToCudnn(a, backward), backward);
    if (c.ok()) bytes = std::max(bytes, *c);  // else cuDNN fails the shape when timed, and is skipped
  }
  return bytes;
}

FlashAttnArgs FlashArgsFromSdpa(const SdpaArgs& a) { return ToFlash(SdpaCandidate{}, a); }

absl::Status SdpaValidate(const SdpaArgs& a, bool backward) {
  if (!std::isfinite(a.dropout_p) || a.dropout_p < 0 || a.dropout_p >= 1)
    return Bad("dropout_p", absl::StrCat("must be in [0, 1), got ", a.dropout_p));
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16 && a.dtype != DType::kF32)
    return Bad("dtype", absl::StrCat("expected bf16, f16 or f32, got ", DTypeName(a.dtype)));
  struct Dim {
    const char* name;
    int64_t v;
  };
  for (const Dim& d : {Dim{"batch", a.batch}, Dim{"heads", a.heads}, Dim{"kv_heads", a.kv_heads},
                       Dim{"seq_q", a.seq_q}, Dim{"seq_k", a.seq_k}})
    if (d.v <= 0 || d.v > (int64_t{1} << 30)) return Bad(d.name, absl::StrCat("must be in [1, 2^30], got ", d.v));
  if (a.batch * a.heads * a.seq_q > (int64_t{1} << 36))
    return Bad("q", absl::StrCat("too many rows (B*H*Tq = ", a.batch * a.heads * a.seq_q, ")"));
  if (a.heads % a.kv_heads != 0)
    return Bad("kv_heads", absl::StrCat("must divide heads (", a.heads, "), got ", a.kv_heads));
  if (a.head_dim <= 0 || a.head_dim > attention::kMathMaxHeadDim)
    return Bad("head_dim", absl::StrCat("must be in [1, ", attention::kMathMaxHeadDim, "], got ", a.head_dim));
  if (!std::isfinite(a.scale) || a.scale < 0)
    return Bad("scale", absl::StrCat("must be finite and > 0 (0: 1/sqrt(D)), got ", a.scale));
  if (a.ds_limit_bytes < 0) return Bad("ds_limit_bytes", absl::StrCat("must be >= 0, got ", a.ds_limit_bytes));
  if (a.attn_mask != nullptr) {
    if (a.mask_dtype != DType::kBool && a.mask_dtype != DType::kF32 && a.mask_dtype != a.dtype)
      return Bad("mask_dtype", absl::StrCat("expected bool, f32 or q's dtype (", DTypeName(a.dtype), "), got ",
                                            DTypeName(a.mask_dtype)));
    LOOM_RETURN_IF_ERROR(MaskStrides(a).status());
  } else if (!a.mask_shape.empty()) {
    return Bad("attn_mask", "null, but mask_shape is set");
  }
  if (a.strided() && !FlashTakes(a))
    return absl::UnimplementedError(absl::StrCat(
        "sdpa: strides: strided q/k/v/o/dout/dq/dk/dv need the flash kernels (bf16/f16, head_dim 64 or 128, no "
        "attn_mask, no dropout); the math kernel takes contiguous tensors (got ", DTypeName(a.dtype), ", head_dim ",
        a.head_dim, a.attn_mask != nullptr ? ", attn_mask" : "", a.dropout_p > 0 ? ", dropout" : "", ")"));
  struct Ptr {
    const char* name;
    const void* p;
  };
  for (const Ptr& p : {Ptr{"q", a.q}, Ptr{"k", a.k}, Ptr{"v", a.v}, Ptr{"o", a.o}})
    if (p.p == nullptr) return Bad(p.name, "null");
  if (backward)  // a forward's lse may be null (inference); the backward reads it
    for (const Ptr& p : {Ptr{"lse", static_cast<const void*>(a.lse)}, Ptr{"dout", a.dout}, Ptr{"dq", a.dq},
                         Ptr{"dk", a.dk}, Ptr{"dv", a.dv}, Ptr{"workspace", a.workspace}})
      if (p.p == nullptr) return Bad(p.name, "null");
  return absl::OkStatus();
}

std::string SdpaCandidate::Name(int64_t head_dim, bool backward) const {
  if (kind == kMath) return backward ? "math bwd (fallback)" : "math fwd (fallback)";
  if (kind == kCudnn) return backward ? "cudnn bwd (fused attention)" : "cudnn fwd (fused attention)";
  return absl::StrCat("flash ", backward ? FlashBackwardVariantName(bwd_variant, dq_variant, head_dim)
                                         : FlashForwardVariantName(fwd_variant, head_dim));
}

SdpaDispatcher::SdpaDispatcher(Timer timer) : timer_(std::move(timer)) {}

SdpaDispatcher& SdpaDispatcher::Global() {
  static SdpaDispatcher* d = [] {
    auto* disp = new SdpaDispatcher();
    disp->tuning_ = &TuningCache::Global();
    if (const char* path = std::getenv("LOOM_SDPA_CACHE"); path != nullptr && path[0] != 0) {
      disp->LoadCache(path).IgnoreError();  // a missing or stale file just means tuning again
      disp->cache_file_ = path;
    }
    return disp;
  }();
  return *d;
}

std::string SdpaDispatcher::Key(const SdpaArgs& a, bool backward) {
  return absl::StrCat(backward ? "bwd" : "fwd", " ", DTypeName(a.dtype), " B", a.batch, " H", a.heads, "/",
                      a.kv_heads, " T", a.seq_q, "/", a.seq_k, " D", a.head_dim, a.causal ? " causal" : "",
                      a.deterministic ? " det" : "", a.attn_mask != nullptr ? " mask" : "",
                      a.dropout_p > 0 ? " dropout" : "", a.strided() ? " strided" : "",
                      !backward && a.lse == nullptr ? " inference" : "");
}

std::vector<SdpaCandidate> SdpaDispatcher::Candidates(const SdpaArgs& a, bool backward) const {
  std::vector<SdpaCandidate> out;
  if (!FlashTakes(a)) {
    SdpaCandidate c;
    c.kind = SdpaCandidate::kMath;
    out.push_back(c);
    return out;
  }
  if (!backward) {
    for (int v = 1; v <= FlashForwardVariants(); ++v) {
      SdpaCandidate c;
      c.fwd_variant = v;
      out.push_back(c);
    }
  } else {
    const int64_t have = a.workspace_bytes >= 0 ? a.workspace_bytes : SdpaBackwardWorkspaceBytes(a);
    for (int v = 1; v <= FlashBackwardVariants(); ++v) {
      if (FlashBwdAtomicDq(v) && a.deterministic) continue;
      if (FlashBwdUsesDs(v) &&
          (!DsFitsLimit(a) || have < FlashAttentionBwdWorkspaceBytes(ShapeOnly(a, kFlashBwdDsVariant))))
        continue;
      SdpaCandidate c;
      c.bwd_variant = v;
      out.push_back(c);
    }
  }
  // cuDNN: with an injected timer (tests) whether or not the library loads.
  const bool cudnn_deterministic_ok = !backward || !a.deterministic || kCudnnSdpaBackwardDeterministic;
  if (cudnn_deterministic_ok && (timer_ || CudnnAvailable().ok())) {
    SdpaCandidate c;
    c.kind = SdpaCandidate::kCudnn;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<double> SdpaDispatcher::Time(const SdpaCandidate& c, const SdpaArgs& a, bool backward) {
  ++timer_calls_;
  if (timer_) return timer_(c, a, backward);
#ifdef LOOM_HAVE_CUDA
  return TimeRuns(a.stream, [&] { return Run(c, a, backward); });
#else
  return absl::UnavailableError("Loom was built without CUDA (nvcc not found)");
#endif
}

absl::StatusOr<SdpaDecision> SdpaDispatcher::Select(const SdpaArgs& a, bool backward) {
  LOOM_RETURN_IF_ERROR(SdpaValidate(a, backward));
  const std::string key = Key(a, backward);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  const std::string tuning_key = TuningKey(key);
  std::vector<SdpaCandidate> cands = Candidates(a, backward);
  SdpaDecision d;
  if (TunedDecision(tuning_key, &d)) {
    cache_[key] = d;
    return d;
  }
  if (cands.size() == 1) {
    d.pick = cands[0];
    d.reason = cands[0].kind != SdpaCandidate::kMath ? "only candidate"
               : a.attn_mask != nullptr || a.dropout_p > 0
                   ? "only candidate (attn_mask and dropout run on the math kernel)"
                   : "only candidate (flash takes bf16/f16 with head_dim 64 or 128)";
  } else {
    // Times every candidate of `list`; returns the index of the fastest.
    auto time_all = [&](const std::vector<SdpaCandidate>& list) -> absl::StatusOr<int> {
      int best = -1;
      double best_ms = 0;
      absl::Status last = absl::OkStatus();
      for (size_t i = 0; i < list.size(); ++i) {
        absl::StatusOr<double> ms = Time(list[i], a, backward);
        if (!ms.ok()) {
          last = ms.status();
          continue;
        }
        d.timings.push_back({list[i].Name(a.head_dim, backward), *ms});
        if (best < 0 || *ms < best_ms) best = static_cast<int>(i), best_ms = *ms;
      }
      if (best < 0) return absl::Status(last.code(), absl::StrCat("sdpa: every candidate failed: ", last.message()));
      d.ms = best_ms;
      return best;
    };
    LOOM_ASSIGN_OR_RETURN(int best, time_all(cands));
    d.pick = cands[best];
    if (backward && d.pick.kind == SdpaCandidate::kFlash && !FlashBwdAtomicDq(d.pick.bwd_variant) &&
        !FlashBwdUsesDs(d.pick.bwd_variant)) {
      // Coordinate descent, second step: the dQ pass with the chosen dK/dV variant.
      std::vector<SdpaCandidate> dqs;
      for (int q = 1; q <= FlashDqVariants(); ++q) {
        SdpaCandidate c = d.pick;
        c.dq_variant = q;
        if (q == FlashDefaultDqVariant(a.head_dim)) continue;  // timed in step one
        dqs.push_back(c);
      }
      const double step1_ms = d.ms;
      const SdpaCandidate step1 = d.pick;
      LOOM_ASSIGN_OR_RETURN(int best_q, time_all(dqs));
      if (d.ms < step1_ms) {
        d.pick = dqs[best_q];
      } else {
        d.pick = step1, d.ms = step1_ms;
      }
    }
    d.reason = absl::StrCat("fastest of ", d.timings.size(), " timed");
    if (!tuning_key.empty())
      tuning_->Put(tuning_key, absl::StrCat(static_cast<int>(d.pick.kind), " ", d.pick.fwd_variant, " ",
                                            d.pick.bwd_variant, " ", d.pick.dq_variant, " ", d.ms));
  }
  cache_[key] = d;
  if (!cache_file_.empty()) {
    std::ofstream f(cache_file_, std::ios::app);
    f << key << "\t" << static_cast<int>(d.pick.kind) << " " << d.pick.fwd_variant << " " << d.pick.bwd_variant << " "
      << d.pick.dq_variant << "\t" << d.ms << "\n";
  }
  return d;
}

std::string SdpaDispatcher::Choice(const SdpaArgs& a, bool backward) const {
  const std::string key = Key(a, backward);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    std::vector<SdpaCandidate> c = Candidates(a, backward);
    std::string names;
    for (const SdpaCandidate& x : c) absl::StrAppend(&names, names.empty() ? "" : ", ", x.Name(a.head_dim, backward));
    return absl::StrCat(key, ": not tuned yet (would time ", c.size(), ": ", names, ")");
  }
  const SdpaDecision& d = it->second;
  std::string s = absl::StrCat(d.pick.Name(a.head_dim, backward), ": ");
  if (d.ms > 0) absl::StrAppend(&s, Ms(d.ms), ", ");
  absl::StrAppend(&s, d.reason);
  // The runner-up, if any.
  const std::string pick_name = d.pick.Name(a.head_dim, backward);
  const std::pair<std::string, double>* next = nullptr;
  for (const auto& t : d.timings)
    if (t.first != pick_name && (next == nullptr || t.second < next->second)) next = &t;
  if (next != nullptr) absl::StrAppend(&s, " (next: ", next->first, " ", Ms(next->second), ")");
  if (d.pick.kind == SdpaCandidate::kCudnn && !timer_)
    if (std::string e = CudnnSdpaEngineChoice(ToCudnn(a, backward), backward); !e.empty())
      absl::StrAppend(&s, "; cuDNN ", e);
  return s;
}

absl::Status SdpaDispatcher::Run(const SdpaCandidate& c, const SdpaArgs& a, bool backward) const {
  if (c.kind == SdpaCandidate::kFlash) {
    const FlashAttnArgs f = ToFlash(c, a);
    return backward ? FlashAttentionBackward(f) : FlashAttentionForward(f);
  }
  if (c.kind == SdpaCandidate::kCudnn) {
    const CudnnSdpaArgs x = ToCudnn(a, backward);
    return backward ? CudnnSdpaBackward(x) : CudnnSdpaForward(x);
  }
#ifdef LOOM_HAVE_CUDA
  const attention::MathParams p = ToMath(a);
  cudaStream_t s = static_cast<cudaStream_t>(a.stream);
  const cudaError_t e = backward ? attention::MathBackward(p, s) : attention::MathForward(p, s);
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("sdpa math ", backward ? "backward" : "forward", ": ", cudaGetErrorString(e)));
#else
  return absl::UnavailableError("Loom was built without CUDA (nvcc not found)");
#endif
}

absl::Status SdpaDispatcher::Forward(const SdpaArgs& a) {
  LOOM_ASSIGN_OR_RETURN(SdpaDecision d, Select(a, false));
  return Run(d.pick, a, false);
}

absl::Status SdpaDispatcher::Backward(const SdpaArgs& a) {
  LOOM_ASSIGN_OR_RETURN(SdpaDecision d, Select(a, true));
  return Run(d.pick, a, true);
}

absl::Status SdpaDispatcher::SaveCache(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ofstream f(path, std::ios::trunc);
  if (!f) return absl::UnavailableError(absl::StrCat("sdpa: cannot write ", path));
  for (const auto& [key, d] : cache_)
    f << key << "\t" << static_cast<int>(d.pick.kind) << " " << d.pick.fwd_variant << " " << d.pick.bwd_variant << " "
      << d.pick.dq_variant << "\t" << d.ms << "\n";
  return f ? absl::OkStatus() : absl::UnavailableError(absl::StrCat("sdpa: write failed: ", path));
}

// "kind fwd bwd dq ms" (a cache line's fields) into d.pick and d.ms, when
// valid in this build (and cuDNN loads, for a cuDNN pick).
bool SdpaDispatcher::ParseDecision(const std::string& fields, SdpaDecision* d) const {
  std::istringstream in(fields);
  int kind = -1;
  if (!(in >> kind >> d->pick.fwd_variant >> d->pick.bwd_variant >> d->pick.dq_variant >> d->ms)) return false;
  if (kind != SdpaCandidate::kFlash && kind != SdpaCandidate::kMath && kind != SdpaCandidate::kCudnn) return false;
  // A cuDNN pick needs the library in this process too (else: tune again).
  if (kind == SdpaCandidate::kCudnn && !timer_ && !CudnnAvailable().ok()) return false;
  if (d->pick.fwd_variant < 0 || d->pick.fwd_variant > FlashForwardVariants() || d->pick.bwd_variant < 0 ||
      d->pick.bwd_variant > FlashBackwardVariants() || d->pick.dq_variant < 0 ||
      d->pick.dq_variant > FlashDqVariants())
    return false;  // written by a build with other variants
  d->pick.kind = static_cast<SdpaCandidate::Kind>(kind);
  return true;
}

absl::Status SdpaDispatcher::LoadCache(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("sdpa: no cache file ", path));
  std::lock_guard<std::mutex> lock(mu_);
  std::string line;
  while (std::getline(f, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, '\t');
    if (parts.size() != 3) continue;
    SdpaDecision d;
    if (!ParseDecision(parts[1] + " " + parts[2], &d)) continue;
    d.reason = absl::StrCat("from cache file ", path);
    cache_[parts[0]] = d;
  }
  return absl::OkStatus();
}

void SdpaDispatcher::SetTuningCache(TuningCache* cache, std::string device_tag) {
  std::lock_guard<std::mutex> lock(mu_);
  tuning_ = cache;
  tuning_tag_ = std::move(device_tag);
}

std::string SdpaDispatcher::TuningKey(const std::string& key) const {
  if (tuning_ == nullptr) return "";
  std::string tag = tuning_tag_;
#ifdef LOOM_HAVE_CUDA
  int dev = 0;
  cudaDeviceProp p{};
  if (tag.empty() && cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    tag = DeviceTag(p.name, p.major, p.minor);
#endif
  return tag.empty() ? "" : absl::StrCat("sdpa ", tag, " ", key);
}

bool SdpaDispatcher::TunedDecision(const std::string& tuning_key, SdpaDecision* d) const {
  if (tuning_key.empty()) return false;
  std::optional<std::string> v = tuning_->Get(tuning_key);
  if (!v || !ParseDecision(*v, d)) return false;
  d->reason = "from the tuning cache";
  return true;
}

bool SdpaDispatcher::MayRunCudnn(const SdpaArgs& a, bool backward) const {
  const std::string key = Key(a, backward);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.pick.kind == SdpaCandidate::kCudnn;
  SdpaDecision d;
  if (TunedDecision(TuningKey(key), &d)) return d.pick.kind == SdpaCandidate::kCudnn;
  return true;
}

}  // namespace loom::kernels::cuda::attention
