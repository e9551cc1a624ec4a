#include "kernels/cuda/attention/attention_checks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/tensor.h"
#include "kernels/cuda/attention/attention_reference.h"
#include "kernels/cuda/attention/attention_source_hash.h"
#include "kernels/cuda/attention/cudnn_sdpa.h"
#include "kernels/cuda/attention/flash_attention.h"
#include "kernels/cuda/attention/sdpa_dispatch.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/device_runtime.h"

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace loom::cuda {
namespace {

using Vec = std::vector<double>;

struct Case {
  DType dtype;
  int64_t batch, heads, kv_heads, seq_q, seq_k, head_dim;
  bool causal;
  bool deterministic = false;
  int fwd_variant = 0, bwd_variant = 0, dq_variant = 0;  // 0: the defaults
  bool dispatch = false;  // through SdpaDispatcher::Global() (autotuned; math fallback)
  bool cudnn = false;     // cuDNN's fused attention (cudnn_sdpa.h)
  bool bshd = false;      // cuDNN only: every tensor stored [B, T, H, D] (strided views)
  bool capture = false;   // cuDNN only: the checked run is a CUDA graph captured after a first eager run
};

// [B, T, H, D] values -> [B, H, T, D].
Vec FromBshd(const Vec& x, int64_t b, int64_t t, int64_t h, int64_t d) {
  Vec y(x.size());
  for (int64_t i = 0; i < b; ++i)
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 0; j < h; ++j)
        for (int64_t e = 0; e < d; ++e) y[((i * h + j) * t + r) * d + e] = x[((i * t + r) * h + j) * d + e];
  return y;
}

double RelErr(const Vec& out, const Vec& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

class Harness {
 public:
  Harness(DeviceRuntime* rt, uint64_t seed) : rt_(rt), seed_(seed) {}
  // Random normal values rounded to dtype, on the device; `values` gets them.
  absl::StatusOr<Tensor> Random(std::vector<int64_t> shape, DType dt, Vec* values) {
    Philox rng(seed_, ++stream_);
    Vec v(NumElements(shape));
    for (size_t i = 0; i < v.size(); ++i) v[i] = rng.Normal(i);
    Tensor host = Tensor::FromVector(shape, v, dt);
    *values = host.ToVector();
    return ToDevice(host, rt_->device());
  }
  absl::StatusOr<Tensor> Poisoned(std::vector<int64_t> shape, DType dt) {
    LOOM_ASSIGN_OR_RETURN(Tensor t, rt_->Empty(shape, dt));
    LOOM_RETURN_IF_ERROR(FillBytes(t.raw_data(), t.nbytes(), 0xFF, rt_->compute_stream()));
    return t;
  }
  absl::StatusOr<Vec> Down(const Tensor& t) {
    LOOM_RETURN_IF_ERROR(rt_->SynchronizeCompute());
    LOOM_ASSIGN_OR_RETURN(Tensor h, ToHost(t));
    return h.ToVector();
  }
  DeviceRuntime* rt() const { return rt_; }

 private:
  DeviceRuntime* rt_;
  uint64_t seed_;
  uint64_t stream_ = 0;
};

// The plans exist (a first eager run): poison the outputs, capture forward +
// backward into a CUDA graph (thread-local capture mode, as the executor's
// step), replay it once. The caller's workspace must cover the plans (no
// allocation inside the capture).
absl::Status CaptureAndReplay(Harness& h, const CudnnSdpaArgs& ca, std::vector<Tensor*> outs) {
#ifdef LOOM_HAVE_CUDA
  LOOM_ASSIGN_OR_RETURN(int64_t need_f, CudnnSdpaWorkspaceBytes(ca, false));
  LOOM_ASSIGN_OR_RETURN(int64_t need_b, CudnnSdpaWorkspaceBytes(ca, true));
  if (std::max(need_f, need_b) > ca.workspace_bytes)
    return absl::InternalError(absl::StrCat("capture check: workspace ", ca.workspace_bytes, " < ", need_b));
  for (Tensor* t : outs) LOOM_RETURN_IF_ERROR(FillBytes(t->raw_data(), t->nbytes(), 0xFF, h.rt()->compute_stream()));
  LOOM_RETURN_IF_ERROR(h.rt()->SynchronizeCompute());
  cudaStream_t s = static_cast<cudaStream_t>(ca.stream);
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    return absl::InternalError("capture check: cudaStreamBeginCapture failed");
  absl::Status run = CudnnSdpaForward(ca);
  if (run.ok()) run = CudnnSdpaBackward(ca);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (!run.ok()) return absl::Status(run.code(), absl::StrCat("under capture: ", run.message()));
  if (end != cudaSuccess) return absl::InternalError(absl::StrCat("capture check: end capture: ", cudaGetErrorString(end)));
  cudaGraphExec_t exec = nullptr;
  cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  if (e == cudaSuccess) e = cudaGraphLaunch(exec, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("capture check: replay: ", cudaGetErrorString(e)));
  return absl::OkStatus();
#else
  return absl::UnavailableError("built without CUDA");
#endif
}

absl::StatusOr<std::vector<std::pair<std::string, double>>> CheckCase(Harness& h, const Case& c) {
  const DType dt = c.dtype;
  const std::vector<int64_t> qs = c.bshd ? std::vector<int64_t>{c.batch, c.seq_q, c.heads, c.head_dim}
                                         : std::vector<int64_t>{c.batch, c.heads, c.seq_q, c.head_dim};
  const std::vector<int64_t> ks = c.bshd ? std::vector<int64_t>{c.batch, c.seq_k, c.kv_heads, c.head_dim}
                                         : std::vector<int64_t>{c.batch, c.kv_heads, c.seq_k, c.head_dim};
  Vec q, k, v, dout;
  LOOM_ASSIGN_OR_RETURN(Tensor dq_in, h.Random(qs, dt, &q));
  LOOM_ASSIGN_OR_RETURN(Tensor dk_in, h.Random(ks, dt, &k));
  LOOM_ASSIGN_OR_RETURN(Tensor dv_in, h.Random(ks, dt, &v));
  LOOM_ASSIGN_OR_RETURN(Tensor ddo, h.Random(qs, dt, &dout));
  // The reference works on [B, H, T, D].
  auto q_layout = [&](const Vec& x) { return c.bshd ? FromBshd(x, c.batch, c.seq_q, c.heads, c.head_dim) : x; };
  auto k_layout = [&](const Vec& x) { return c.bshd ? FromBshd(x, c.batch, c.seq_k, c.kv_heads, c.head_dim) : x; };
  q = q_layout(q), dout = q_layout(dout), k = k_layout(k), v = k_layout(v);
  LOOM_ASSIGN_OR_RETURN(Tensor o, h.Poisoned(qs, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor lse, h.Poisoned({c.batch, c.heads, c.seq_q}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor dq, h.Poisoned(qs, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor dk, h.Poisoned(ks, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor dv, h.Poisoned(ks, dt));
  FlashAttnArgs a;
  a.dtype = dt;
  a.batch = c.batch, a.heads = c.heads, a.kv_heads = c.kv_heads;
  a.seq_q = c.seq_q, a.seq_k = c.seq_k, a.head_dim = c.head_dim;
  a.causal = c.causal;
  a.deterministic = c.deterministic;
  a.fwd_variant = c.fwd_variant, a.bwd_variant = c.bwd_variant, a.dq_variant = c.dq_variant;
  a.q = dq_in.raw_data(), a.k = dk_in.raw_data(), a.v = dv_in.raw_data();
  a.o = o.raw_data(), a.lse = lse.data<float>();
  a.dout = ddo.raw_data(), a.dq = dq.raw_data(), a.dk = dk.raw_data(), a.dv = dv.raw_data();
  SdpaArgs sa;
  sa.dtype = dt;
  sa.batch = c.batch, sa.heads = c.heads, sa.kv_heads = c.kv_heads;
  sa.seq_q = c.seq_q, sa.seq_k = c.seq_k, sa.head_dim = c.head_dim;
  sa.causal = c.causal;
  sa.deterministic = c.deterministic;
  int64_t ws_bytes = std::max<int64_t>(FlashAttentionBwdWorkspaceBytes(a), SdpaBackwardWorkspaceBytes(sa));
  const int64_t ws_floats = (ws_bytes + 3) / 4 + (c.capture ? (int64_t{64} << 20) / 4 : 0);  // capture: + 64 MiB
  LOOM_ASSIGN_OR_RETURN(Tensor ws, h.Poisoned({ws_floats}, DType::kF32));
  a.workspace = ws.raw_data();
  a.stream = h.rt()->compute_stream();
  if (c.cudnn) {
    CudnnSdpaArgs ca;
    ca.dtype = dt;
    ca.batch = c.batch, ca.heads = c.heads, ca.kv_heads = c.kv_heads;
    ca.seq_q = c.seq_q, ca.seq_k = c.seq_k, ca.head_dim = c.head_dim;
    ca.causal = c.causal;
    ca.q = a.q, ca.k = a.k, ca.v = a.v, ca.o = a.o, ca.lse = a.lse;
    ca.dout = a.dout, ca.dq = a.dq, ca.dk = a.dk, ca.dv = a.dv;
    ca.workspace = a.workspace, ca.workspace_bytes = ws_floats * 4;
    ca.stream = a.stream;
    if (c.bshd) {
      const CudnnStrides qst{c.seq_q * c.heads * c.head_dim, c.head_dim, c.heads * c.head_dim};
      const CudnnStrides kst{c.seq_k * c.kv_heads * c.head_dim, c.head_dim, c.kv_heads * c.head_dim};
      ca.q_strides = ca.o_strides = ca.dout_strides = ca.dq_strides = qst;
      ca.k_strides = ca.v_strides = ca.dk_strides = ca.dv_strides = kst;
    }
    LOOM_RETURN_IF_ERROR(CudnnSdpaForward(ca));
    LOOM_RETURN_IF_ERROR(CudnnSdpaBackward(ca));
    if (c.capture) LOOM_RETURN_IF_ERROR(CaptureAndReplay(h, ca, {&o, &lse, &dq, &dk, &dv}));
  } else if (c.dispatch) {
    sa.q = a.q, sa.k = a.k, sa.v = a.v, sa.o = a.o, sa.lse = a.lse;
    sa.dout = a.dout, sa.dq = a.dq, sa.dk = a.dk, sa.dv = a.dv, sa.workspace = a.workspace;
    sa.stream = a.stream;
    SdpaDispatcher& d = SdpaDispatcher::Global();
    LOOM_RETURN_IF_ERROR(d.Forward(sa));
    LOOM_RETURN_IF_ERROR(d.Backward(sa));
    // The tuning runs wrote the outputs too; poison them and run the choice once more.
    for (Tensor* t : {&o, &lse, &dq, &dk, &dv})
      LOOM_RETURN_IF_ERROR(FillBytes(t->raw_data(), t->nbytes(), 0xFF, h.rt()->compute_stream()));
    LOOM_RETURN_IF_ERROR(d.Forward(sa));
    LOOM_RETURN_IF_ERROR(d.Backward(sa));
  } else {
    LOOM_RETURN_IF_ERROR(FlashAttentionForward(a));
    LOOM_RETURN_IF_ERROR(FlashAttentionBackward(a));
  }

  ref::SdpaShape s;
  s.batch = c.batch, s.heads = c.heads, s.kv_heads = c.kv_heads;
  s.seq_q = c.seq_q, s.seq_k = c.seq_k, s.head_dim = c.head_dim;
  s.causal = c.causal;
  s.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  Vec ro, rlse, rdq, rdk, rdv;
  ref::SdpaForward(s, q, k, v, &ro, &rlse);
  ref::SdpaBackward(s, q, k, v, dout, &rdq, &rdk, &rdv);
  std::vector<std::pair<std::string, double>> errs;
  LOOM_ASSIGN_OR_RETURN(Vec go, h.Down(o));
  errs.push_back({"o", RelErr(q_layout(go), ro)});
  LOOM_ASSIGN_OR_RETURN(Vec glse, h.Down(lse));
  errs.push_back({"lse", RelErr(glse, rlse)});
  LOOM_ASSIGN_OR_RETURN(Vec gdq, h.Down(dq));
  errs.push_back({"dq", RelErr(q_layout(gdq), rdq)});
  LOOM_ASSIGN_OR_RETURN(Vec gdk, h.Down(dk));
  errs.push_back({"dk", RelErr(k_layout(gdk), rdk)});
  LOOM_ASSIGN_OR_RETURN(Vec gdv, h.Down(dv));
  errs.push_back({"dv", RelErr(k_layout(gdv), rdv)});
  return errs;
}

}  // namespace

const char* AttentionSourceHash() { return LOOM_CUDA_ATTENTION_SOURCE_HASH; }

absl::StatusOr<std::vector<CheckResult>> RunAttentionChecks(const CheckOptions& opts) {
  LOOM_RETURN_IF_ERROR(CudaAvailable());
  LOOM_ASSIGN_OR_RETURN(DeviceRuntime * rt, DeviceRuntime::Get(0));
  LOOM_RETURN_IF_ERROR(rt->MakeCurrent());
  Harness h(rt, opts.seed);
  const DType bf = DType::kBF16, hf = DType::kF16;
  std::vector<Case> cases = {
      {bf, 2, 4, 4, 200, 200, 64, false},  {bf, 2, 4, 4, 200, 200, 64, true},
      {bf, 1, 4, 2, 333, 333, 128, false}, {bf, 1, 4, 2, 333, 333, 128, true},
      {bf, 1, 2, 2, 100, 257, 128, false}, {bf, 1, 2, 2, 257, 100, 128, true},
      {bf, 1, 3, 1, 17, 17, 64, true},     {bf, 1, 2, 2, 128, 128, 128, true},
      {hf, 1, 6, 2, 130, 130, 64, true},   {hf, 1, 2, 2, 256, 256, 128, false},
      {bf, 1, 4, 2, 333, 333, 128, true, true}, {bf, 2, 2, 2, 100, 150, 64, false, true},
  };
  // Every compiled kernel variant (flash_variants.h) at least once, D 64 and 128.
  const int n_variants = std::max(FlashForwardVariants(), FlashBackwardVariants());
  for (int i = 1; i <= n_variants; ++i) {
    for (int64_t d : {64, 128}) {
      Case c{i % 2 ? bf : hf, 1, 4, 2, 300 + 7 * i, 280 + 11 * i, d, i % 3 != 0};
      c.fwd_variant = (i - 1) % FlashForwardVariants() + 1;
      c.bwd_variant = (i - 1) % FlashBackwardVariants() + 1;
      c.dq_variant = (i + (d == 64)) % FlashDqVariants() + 1;
      cases.push_back(c);
    }
  }
  // Through the dispatcher: the math fallback (D or dtype flash does not take)
  // and an autotuned flash case.
  const DType f32 = DType::kF32;
  for (Case c : std::vector<Case>{{f32, 1, 4, 2, 150, 170, 96, true},
                                  {bf, 2, 3, 1, 100, 100, 32, false},
                                  {hf, 1, 2, 2, 77, 130, 256, true},
                                  {f32, 1, 2, 2, 64, 64, 64, false},
                                  {bf, 1, 4, 2, 300, 300, 128, true}}) {
    c.dispatch = true;
    cases.push_back(c);
  }
  // cuDNN's fused attention directly: causal or not, GQA, D 64/128, bf16/f16,
  // Tq != Tk, and strided [B, T, H, D] storage.
  const bool have_cudnn = CudnnAvailable().ok();
  if (have_cudnn) {
    for (Case c : std::vector<Case>{{bf, 2, 4, 4, 200, 200, 64, false},  {bf, 2, 4, 4, 200, 200, 64, true},
                                    {bf, 1, 4, 2, 333, 333, 128, false}, {bf, 1, 4, 2, 333, 333, 128, true},
                                    {hf, 1, 6, 2, 130, 130, 64, true},   {hf, 1, 2, 2, 256, 256, 128, false},
                                    {bf, 1, 2, 2, 100, 257, 128, false}, {bf, 1, 8, 1, 128, 128, 64, true},
                                    {bf, 2, 4, 2, 256, 256, 128, true}}) {
      c.cudnn = true;
      cases.push_back(c);
    }
    Case strided{bf, 2, 4, 2, 192, 192, 64, true};
    strided.cudnn = strided.bshd = true;
    cases.push_back(strided);
    Case captured{bf, 2, 4, 4, 256, 256, 64, true};
    captured.cudnn = captured.capture = true;
    cases.push_back(captured);
  }
  if (opts.full) {
    cases.push_back({bf, 1, 2, 2, 1024, 1024, 128, true});
    cases.push_back({bf, 2, 4, 1, 777, 777, 64, false});
  }
  std::vector<CheckResult> rows;
  if (!have_cudnn) {
    CheckResult r;
    r.name = "cudnn sdpa fwd+bwd: SKIPPED";
    r.dtype = "bf16/f16";
    r.shape = "-";
    r.pass = true;
    r.detail = std::string(CudnnAvailable().message());
    rows.push_back(r);
  }
  for (const Case& c : cases) {
    CheckResult r;
    r.name = absl::StrCat(c.cudnn      ? (c.bshd      ? "cudnn sdpa fwd+bwd [b,t,h,d] strided"
                                          : c.capture ? "cudnn sdpa fwd+bwd in a captured CUDA graph"
                                                      : "cudnn sdpa fwd+bwd")
                          : c.dispatch ? "sdpa dispatch fwd+bwd"
                                       : "flash_attention fwd+bwd",
                          c.causal ? " causal" : "",
                          c.kv_heads != c.heads ? " gqa" : "", c.deterministic ? " det" : "",
                          c.fwd_variant + c.bwd_variant + c.dq_variant == 0
                              ? ""
                              : absl::StrCat(" [", FlashForwardVariantName(c.fwd_variant, c.head_dim), " | ",
                                             FlashBackwardVariantName(c.bwd_variant, c.dq_variant, c.head_dim), "]"));
    r.dtype = std::string(DTypeName(c.dtype));
    r.shape = absl::StrCat("B", c.batch, " H", c.heads, "/", c.kv_heads, " T", c.seq_q, "/", c.seq_k, " D",
                           c.head_dim);
    r.tol = 1e-2;
    auto e = CheckCase(h, c);
    if (c.dispatch) {
      SdpaArgs sa;
      sa.dtype = c.dtype;
      sa.batch = c.batch, sa.heads = c.heads, sa.kv_heads = c.kv_heads;
      sa.seq_q = c.seq_q, sa.seq_k = c.seq_k, sa.head_dim = c.head_dim;
      sa.causal = c.causal;
      absl::StrAppend(&r.name, " [", SdpaDispatcher::Global().Choice(sa, false), " | ",
                      SdpaDispatcher::Global().Choice(sa, true), "]");
    }
    if (!e.ok()) {
      r.rel_err = INFINITY;
      r.detail = std::string(e.status().message());
    } else {
      for (auto& kv : *e) {
        r.rel_err = std::max(r.rel_err, std::isfinite(kv.second) ? kv.second : INFINITY);
        absl::StrAppend(&r.detail, r.detail.empty() ? "" : " ", kv.first, "=", absl::StrFormat("%.2e", kv.second));
      }
      r.pass = std::isfinite(r.rel_err) && r.rel_err <= r.tol;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace loom::cuda
