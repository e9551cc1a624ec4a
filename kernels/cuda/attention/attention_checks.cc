#include "kernels/cuda/attention/attention_checks.h"

#include <algorithm>
#include <array>
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

namespace loom::kernels::cuda::attention {
namespace {

using Vec = std::vector<double>;

struct Case {
  DType dtype;
  int64_t batch, heads, kv_heads, seq_q, seq_k, head_dim;
  bool causal;
  bool deterministic = false;
  int fwd_variant = 0, bwd_variant = 0, dq_variant = 0;  // 0: the defaults
  bool dispatch = false;  // through SdpaDispatcher::Global() (autotuned; math fallback)
  // attn_mask (dispatcher cases): 0 none, 1 bool, 2 additive f32, 3 additive
  // in `dtype`; of mask_shape (broadcast to [B, H, Tq, Tk]). Dropout p.
  int mask = 0;
  std::vector<int64_t> mask_shape;
  double dropout = 0;
  // 0: contiguous [B, H, T, D]; 1: every tensor in [B, T, H, D] order (strided
  // views); 2: q/k/v and dq/dk/dv as windows of one [B, T, 3, H, D] buffer
  // (the fused qkv projection), o and dout [B, T, H, D] (H == Hkv, Tq == Tk).
  int layout = 0;
  bool cudnn = false;    // cuDNN's fused attention (cudnn_sdpa.h), with the layout's strides
  bool capture = false;  // cuDNN only: the checked run is a CUDA graph captured after a first eager run
};

// A random mask of c.mask_shape (values; -inf/false for ~30% of entries and
// for the whole first row of every [Tq, Tk] slice it has) and its expansion
// to [B, H, Tq, Tk] for the reference.
void MakeMask(const Case& c, uint64_t seed, Vec* values, Vec* expanded) {
  const std::vector<int64_t>& ms = c.mask_shape;
  Philox rng(seed, 777);
  values->assign(NumElements(ms), 0.0);
  const int64_t tk = ms.back(), tq = ms.size() >= 2 ? ms[ms.size() - 2] : 1;
  for (size_t i = 0; i < values->size(); ++i) {
    const bool masked = rng.Uniform(i) < 0.3 || (tq > 1 && (static_cast<int64_t>(i) / tk) % tq == 0);
    (*values)[i] = c.mask == 1 ? (masked ? 0.0 : 1.0) : masked ? -INFINITY : rng.Normal(i + (1 << 30));
  }
  std::array<int64_t, 4> full = {c.batch, c.heads, c.seq_q, c.seq_k}, st = {0, 0, 0, 0};
  int64_t stride = 1;
  for (int i = static_cast<int>(ms.size()) - 1, d = 3; i >= 0; --i, --d) {
    st[d] = ms[i] == 1 ? 0 : stride;
    stride *= ms[i];
  }
  expanded->assign(full[0] * full[1] * full[2] * full[3], 0.0);
  int64_t n = 0;
  for (int64_t b = 0; b < full[0]; ++b)
    for (int64_t h = 0; h < full[1]; ++h)
      for (int64_t i = 0; i < full[2]; ++i)
        for (int64_t j = 0; j < full[3]; ++j)
          (*expanded)[n++] = (*values)[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
}

// Logical [B, X, T, D] index i -> element offset under (off, strides).
int64_t At(int64_t i, int64_t x, int64_t t, int64_t d, int64_t off, const FlashStrides& s) {
  const int64_t dd = i % d, tt = i / d % t, xx = i / d / t % x, bb = i / d / t / x;
  return off + bb * s.batch + xx * s.head + tt * s.row + dd;
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
  absl::StatusOr<Tensor> Poisoned(std::vector<int64_t> shape, DType dt) { return CheckPoisoned(rt_, shape, dt); }
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

CudnnStrides ToCudnn(const FlashStrides& s) { return CudnnStrides{s.batch, s.head, s.row}; }

// Inference forwards (no lse): every flash forward variant (D 64 and 128 in
// turn, causal or not, GQA, ragged ends), cuDNN's graph without the stats,
// and the dispatcher tuning under the inference key.
void AppendInferenceRows(DeviceRuntime* rt, uint64_t seed, bool cudnn, std::vector<CheckResult>* rows) {
  std::vector<InferenceCase> cases;
  for (int v = 0; v <= FlashForwardVariants(); ++v) {
    InferenceCase c;
    c.fwd_variant = v;
    c.dtype = v % 3 == 2 ? DType::kF16 : DType::kBF16;
    c.batch = 2, c.heads = 4, c.kv_heads = 2, c.seq_q = 333 + v, c.seq_k = 290 + 3 * v;
    c.head_dim = v % 2 ? 128 : 64, c.causal = v % 2 == 0;
    cases.push_back(c);
  }
  for (InferencePath p : {InferencePath::kCudnn, InferencePath::kDispatch}) {
    if (p == InferencePath::kCudnn && !cudnn) continue;
    for (int i = 0; i < 2; ++i) {
      InferenceCase c;
      c.path = p;
      c.batch = 2, c.heads = 4, c.kv_heads = i ? 4 : 2, c.seq_q = i ? 256 : 333, c.seq_k = i ? 256 : 300;
      c.head_dim = i ? 64 : 128, c.causal = i == 1;
      cases.push_back(c);
    }
  }
  for (const InferenceCase& c : cases) {
    absl::StatusOr<CheckResult> r = RunInferenceCheck(rt, seed, c);
    if (r.ok()) {
      rows->push_back(std::move(*r));
      continue;
    }
    CheckResult bad;
    bad.name = "inference fwd (no lse)";
    bad.shape = absl::StrCat("B", c.batch, " H", c.heads, "/", c.kv_heads, " T", c.seq_q, "/", c.seq_k, " D",
                             c.head_dim);
    bad.rel_err = INFINITY;
    bad.detail = std::string(r.status().message());
    rows->push_back(std::move(bad));
  }
}

absl::StatusOr<std::vector<std::pair<std::string, double>>> CheckCase(Harness& h, const Case& c) {
  const DType dt = c.dtype;
  const std::vector<int64_t> qs = {c.batch, c.heads, c.seq_q, c.head_dim};
  const std::vector<int64_t> ks = {c.batch, c.kv_heads, c.seq_k, c.head_dim};
  Vec q, k, v, dout;
  LOOM_ASSIGN_OR_RETURN(Tensor dq_in, h.Random(qs, dt, &q));
  LOOM_ASSIGN_OR_RETURN(Tensor dk_in, h.Random(ks, dt, &k));
  LOOM_ASSIGN_OR_RETURN(Tensor dv_in, h.Random(ks, dt, &v));
  LOOM_ASSIGN_OR_RETURN(Tensor ddo, h.Random(qs, dt, &dout));
  LOOM_ASSIGN_OR_RETURN(Tensor o, h.Poisoned(qs, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor lse, h.Poisoned({c.batch, c.heads, c.seq_q}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(Tensor dq, h.Poisoned(qs, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor dk, h.Poisoned(ks, dt));
  LOOM_ASSIGN_OR_RETURN(Tensor dv, h.Poisoned(ks, dt));
  // Strided layouts: the same values in other storage; outputs gathered back below.
  struct View {
    int buf;  // 0: the qkv-like buffer (in or grad), 1: own [B, T, X, D] storage
    int64_t off;
    FlashStrides s;
  };
  const int64_t B = c.batch, H = c.heads, HK = c.kv_heads, D = c.head_dim;
  auto bthd = [&](int64_t x, int64_t t) { return View{1, 0, FlashStrides{t * x * D, D, x * D}}; };
  View vq = bthd(H, c.seq_q), vk = bthd(HK, c.seq_k), vv = vk, vo = vq;
  if (c.layout == 2) {
    if (H != HK || c.seq_q != c.seq_k) return absl::InvalidArgumentError("layout 2 needs H == Hkv and Tq == Tk");
    const FlashStrides s3{c.seq_q * 3 * H * D, D, 3 * H * D};
    vq = View{0, 0, s3}, vk = View{0, H * D, s3}, vv = View{0, 2 * H * D, s3};
  }
  Tensor sq, sk, sv, sdo, so, sdq, sdk, sdv;  // strided storage (layout != 0)
  auto upload = [&](const Vec& x, int64_t xh, int64_t t, const View& w, Vec* store) {
    for (size_t i = 0; i < x.size(); ++i) (*store)[At(static_cast<int64_t>(i), xh, t, D, w.off, w.s)] = x[i];
  };
  auto gather = [&](const Tensor& t, int64_t xh, int64_t tt, const View& w) -> absl::StatusOr<Vec> {
    LOOM_ASSIGN_OR_RETURN(Vec all, h.Down(t));
    Vec x(B * xh * tt * D);
    for (size_t i = 0; i < x.size(); ++i) x[i] = all[At(static_cast<int64_t>(i), xh, tt, D, w.off, w.s)];
    return x;
  };
  if (c.layout != 0) {
    auto up = [&](const Vec& store, std::vector<int64_t> shape) -> absl::StatusOr<Tensor> {
      return ToDevice(Tensor::FromVector(shape, store, dt), h.rt()->device());
    };
    if (c.layout == 2) {
      Vec qkv(B * c.seq_q * 3 * H * D, 0.0), od(B * c.seq_q * H * D, 0.0);
      upload(q, H, c.seq_q, vq, &qkv), upload(k, HK, c.seq_k, vk, &qkv), upload(v, HK, c.seq_k, vv, &qkv);
      upload(dout, H, c.seq_q, vo, &od);
      LOOM_ASSIGN_OR_RETURN(sq, up(qkv, {B, c.seq_q, 3, H, D}));
      sk = sv = sq;
      LOOM_ASSIGN_OR_RETURN(sdo, up(od, {B, c.seq_q, H, D}));
      LOOM_ASSIGN_OR_RETURN(sdq, h.Poisoned({B, c.seq_q, 3, H, D}, dt));
      sdk = sdv = sdq;
    } else {
      Vec bq(B * c.seq_q * H * D), bk(B * c.seq_k * HK * D), bv(bk.size()), bd(bq.size());
      upload(q, H, c.seq_q, vq, &bq), upload(k, HK, c.seq_k, vk, &bk), upload(v, HK, c.seq_k, vv, &bv);
      upload(dout, H, c.seq_q, vo, &bd);
      LOOM_ASSIGN_OR_RETURN(sq, up(bq, {B, c.seq_q, H, D}));
      LOOM_ASSIGN_OR_RETURN(sk, up(bk, {B, c.seq_k, HK, D}));
      LOOM_ASSIGN_OR_RETURN(sv, up(bv, {B, c.seq_k, HK, D}));
      LOOM_ASSIGN_OR_RETURN(sdo, up(bd, {B, c.seq_q, H, D}));
      LOOM_ASSIGN_OR_RETURN(sdq, h.Poisoned({B, c.seq_q, H, D}, dt));
      LOOM_ASSIGN_OR_RETURN(sdk, h.Poisoned({B, c.seq_k, HK, D}, dt));
      LOOM_ASSIGN_OR_RETURN(sdv, h.Poisoned({B, c.seq_k, HK, D}, dt));
    }
    LOOM_ASSIGN_OR_RETURN(so, h.Poisoned({B, c.seq_q, H, D}, dt));
  }
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
  if (c.layout != 0) {
    const int64_t es = static_cast<int64_t>(DTypeSize(dt));
    auto ptr = [&](const Tensor& t, const View& w) { return static_cast<char*>(const_cast<void*>(t.raw_data())) + w.off * es; };
    a.q = ptr(sq, vq), a.k = ptr(sk, vk), a.v = ptr(sv, vv), a.o = ptr(so, vo);
    a.dout = ptr(sdo, vo), a.dq = ptr(sdq, vq), a.dk = ptr(sdk, vk), a.dv = ptr(sdv, vv);
    a.q_strides = a.dq_strides = vq.s, a.k_strides = a.dk_strides = vk.s, a.v_strides = a.dv_strides = vv.s;
    a.o_strides = a.dout_strides = vo.s;
  }
  SdpaArgs sa;
  sa.dtype = dt;
  sa.batch = c.batch, sa.heads = c.heads, sa.kv_heads = c.kv_heads;
  sa.seq_q = c.seq_q, sa.seq_k = c.seq_k, sa.head_dim = c.head_dim;
  sa.causal = c.causal;
  sa.deterministic = c.deterministic;
  const int64_t ws_floats =
      (std::max<int64_t>(FlashAttentionBwdWorkspaceBytes(a), SdpaBackwardWorkspaceBytes(sa)) + 3) / 4 +
      (c.capture ? (int64_t{64} << 20) / 4 : 0);  // capture: + 64 MiB for cuDNN's plans
  LOOM_ASSIGN_OR_RETURN(Tensor ws, h.Poisoned({ws_floats}, DType::kF32));
  a.workspace = ws.raw_data();
  a.stream = h.rt()->compute_stream();
  Vec mask_values, mask_full;
  Tensor mask_dev;
  if (c.mask != 0) {
    MakeMask(c, c.seq_q * 131 + c.seq_k, &mask_values, &mask_full);
    const DType mdt = c.mask == 1 ? DType::kBool : c.mask == 2 ? DType::kF32 : dt;
    LOOM_ASSIGN_OR_RETURN(mask_dev, ToDevice(Tensor::FromVector(c.mask_shape, mask_values, mdt), h.rt()->device()));
    if (c.mask == 3) mask_full = Tensor::FromVector({static_cast<int64_t>(mask_full.size())}, mask_full, dt).ToVector();
    sa.attn_mask = mask_dev.raw_data();
    sa.mask_dtype = mdt;
    sa.mask_shape = c.mask_shape;
  }
  sa.dropout_p = static_cast<float>(c.dropout);
  sa.dropout_seed = 4242, sa.dropout_offset = 17;
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
    ca.q_strides = ToCudnn(a.q_strides), ca.k_strides = ToCudnn(a.k_strides), ca.v_strides = ToCudnn(a.v_strides);
    ca.o_strides = ToCudnn(a.o_strides), ca.dout_strides = ToCudnn(a.dout_strides);
    ca.dq_strides = ToCudnn(a.dq_strides), ca.dk_strides = ToCudnn(a.dk_strides), ca.dv_strides = ToCudnn(a.dv_strides);
    LOOM_RETURN_IF_ERROR(CudnnSdpaForward(ca));
    LOOM_RETURN_IF_ERROR(CudnnSdpaBackward(ca));
    if (c.capture) {
      std::vector<Tensor*> outs;
      for (Tensor* t : {&o, &lse, &dq, &dk, &dv, &so, &sdq, &sdk, &sdv})
        if (t->defined()) outs.push_back(t);
      LOOM_RETURN_IF_ERROR(CaptureAndReplay(h, ca, outs));
    }
  } else if (c.dispatch) {
    sa.q = a.q, sa.k = a.k, sa.v = a.v, sa.o = a.o, sa.lse = a.lse;
    sa.dout = a.dout, sa.dq = a.dq, sa.dk = a.dk, sa.dv = a.dv, sa.workspace = a.workspace;
    sa.q_strides = a.q_strides, sa.k_strides = a.k_strides, sa.v_strides = a.v_strides, sa.o_strides = a.o_strides;
    sa.dout_strides = a.dout_strides, sa.dq_strides = a.dq_strides, sa.dk_strides = a.dk_strides;
    sa.dv_strides = a.dv_strides;
    sa.stream = a.stream;
    SdpaDispatcher& d = SdpaDispatcher::Global();
    LOOM_RETURN_IF_ERROR(d.Forward(sa));
    LOOM_RETURN_IF_ERROR(d.Backward(sa));
    // The tuning runs wrote the outputs too; poison them and run the choice once more.
    for (Tensor* t : {&o, &lse, &dq, &dk, &dv, &so, &sdq, &sdk, &sdv})
      if (t->defined())
        LOOM_RETURN_IF_ERROR(FillBytes(t->raw_data(), t->nbytes(), 0xFF, h.rt()->compute_stream()));
    LOOM_RETURN_IF_ERROR(d.Forward(sa));
    LOOM_RETURN_IF_ERROR(d.Backward(sa));
  } else {
    LOOM_RETURN_IF_ERROR(FlashAttentionForward(a));
    LOOM_RETURN_IF_ERROR(FlashAttentionBackward(a));
    // The warp-specialised kernels asked for (the forward's default is one,
    // the backward's dK/dV pass another) must have run, not their fallback:
    // every case's operands are on 16 bytes.
    const bool ws_fwd = c.fwd_variant == 0 || (c.fwd_variant >= kFlashFwdWsVariant &&
                                               c.fwd_variant <= kFlashFwdWsSt3Variant);
    const int bv = FlashResolvedBackwardVariant(a);
    const bool ws_bwd = bv == kFlashBwdWsDsVariant || bv == kFlashBwdWsDs1Variant || bv == kFlashBwdWsAtomicVariant;
    for (bool backward : {false, true}) {
      if (!(backward ? ws_bwd : ws_fwd)) continue;
      absl::Status ms = FlashWsMapsStatus(a, backward);
      if (!ms.ok() && !absl::IsUnavailable(ms)) return ms;
    }
  }

  ref::SdpaShape s;
  s.batch = c.batch, s.heads = c.heads, s.kv_heads = c.kv_heads;
  s.seq_q = c.seq_q, s.seq_k = c.seq_k, s.head_dim = c.head_dim;
  s.causal = c.causal;
  s.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  s.mask = mask_full;
  s.mask_bool = c.mask == 1;
  s.dropout_p = sa.dropout_p;
  s.dropout_seed = sa.dropout_seed, s.dropout_offset = sa.dropout_offset;
  Vec ro, rlse, rdq, rdk, rdv;
  ref::SdpaForward(s, q, k, v, &ro, &rlse);
  ref::SdpaBackward(s, q, k, v, dout, &rdq, &rdk, &rdv);
  std::vector<std::pair<std::string, double>> errs;
  const bool st = c.layout != 0;
  LOOM_ASSIGN_OR_RETURN(Vec go, st ? gather(so, H, c.seq_q, vo) : h.Down(o));
  errs.push_back({"o", RelErr(go, ro)});
  LOOM_ASSIGN_OR_RETURN(Vec glse, h.Down(lse));
  // Rows with every key masked: lse is -inf on both sides; compare the rest.
  Vec glse_f, rlse_f;
  for (size_t i = 0; i < rlse.size(); ++i) {
    if (std::isinf(rlse[i]) && rlse[i] < 0) {
      if (!(std::isinf(glse[i]) && glse[i] < 0)) return absl::InternalError(absl::StrCat("lse row ", i, " should be -inf"));
      continue;
    }
    glse_f.push_back(glse[i]), rlse_f.push_back(rlse[i]);
  }
  errs.push_back({"lse", RelErr(glse_f, rlse_f)});
  LOOM_ASSIGN_OR_RETURN(Vec gdq, st ? gather(sdq, H, c.seq_q, vq) : h.Down(dq));
  errs.push_back({"dq", RelErr(gdq, rdq)});
  LOOM_ASSIGN_OR_RETURN(Vec gdk, st ? gather(sdk, HK, c.seq_k, vk) : h.Down(dk));
  errs.push_back({"dk", RelErr(gdk, rdk)});
  LOOM_ASSIGN_OR_RETURN(Vec gdv, st ? gather(sdv, HK, c.seq_k, vv) : h.Down(dv));
  errs.push_back({"dv", RelErr(gdv, rdv)});
  return errs;
}

}  // namespace

absl::StatusOr<Tensor> CheckRandom(DeviceRuntime* rt, Philox& rng, uint64_t* ctr, const std::vector<int64_t>& shape,
                                   DType dt, std::vector<double>* values) {
  Vec v(NumElements(shape));
  for (double& x : v) x = rng.Normal((*ctr)++);
  Tensor t = Tensor::FromVector(shape, v, dt);
  *values = t.ToVector();
  return ToDevice(t, rt->device());
}

absl::StatusOr<Tensor> CheckPoisoned(DeviceRuntime* rt, const std::vector<int64_t>& shape, DType dt) {
  LOOM_ASSIGN_OR_RETURN(Tensor t, rt->Empty(shape, dt));
  LOOM_RETURN_IF_ERROR(FillBytes(t.raw_data(), t.nbytes(), 0xFF, rt->compute_stream()));
  return t;
}

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
  // The wgmma kernels (sm_90a) beyond the loop's one case per D: bf16 and
  // f16, causal or not, GQA, Tq != Tk both ways, ragged tile ends; both
  // forward schedules, and the wgmma stored-dS backward.
  const std::vector<Case> wgmma_cases = {
      {bf, 2, 4, 2, 333, 333, 128, false}, {bf, 2, 4, 2, 333, 333, 128, true}, {bf, 1, 4, 4, 200, 517, 64, false},
      {bf, 1, 4, 4, 517, 200, 64, true},   {hf, 1, 6, 2, 130, 130, 128, true}, {hf, 2, 2, 2, 256, 256, 64, false},
      {bf, 1, 2, 1, 1000, 1000, 128, true}, {bf, 1, 3, 3, 17, 40, 128, false}, {bf, 1, 2, 2, 130, 130, 64, true}};
  for (size_t i = 0; i < wgmma_cases.size(); ++i) {
    Case c = wgmma_cases[i];
    const int fwd[] = {kFlashFwdWgmmaVariant, kFlashFwdWgmmaPipeVariant, kFlashFwdWgmmaPipe1Variant};
    c.fwd_variant = fwd[i % 3];
    c.bwd_variant = i % 2 ? kFlashBwdWgmmaDs1Variant : kFlashBwdWgmmaDsVariant;
    cases.push_back(c);
  }
  // The warp-specialised forward and backward kernels (TMA), every block
  // size: several stages of the rings, ragged tile ends, GQA, Tq != Tk both
  // ways, Tq not a multiple of 4 (each head's lse rows at another offset),
  // f16, strided views ([B, T, H, D] and the fused qkv buffer).
  const std::vector<Case> ws_cases = {
      {bf, 2, 4, 2, 1000, 1000, 128, false}, {bf, 2, 4, 2, 1000, 1000, 128, true}, {bf, 1, 4, 4, 300, 1300, 64, false},
      {bf, 1, 4, 1, 1300, 300, 64, true},    {hf, 1, 6, 2, 777, 777, 128, true},   {hf, 2, 2, 2, 520, 520, 64, false},
      {bf, 1, 3, 3, 17, 40, 128, false},     {bf, 1, 2, 2, 640, 640, 64, true},    {bf, 2, 8, 2, 1000, 1000, 128, true},
      {bf, 1, 4, 2, 333, 333, 64, true},     {hf, 2, 2, 2, 251, 251, 128, false},  {bf, 1, 4, 2, 333, 333, 128, true}};
  for (size_t i = 0; i < ws_cases.size(); ++i) {
    Case c = ws_cases[i];
    const int ws[] = {kFlashFwdWsVariant, kFlashFwdWs3Variant, kFlashFwdWs1Variant, kFlashFwdWsSt3Variant};
    c.fwd_variant = ws[i % 4];
    const int ws_bwd[] = {kFlashBwdWsDsVariant, kFlashBwdWsDs1Variant, kFlashBwdWsAtomicVariant};
    c.bwd_variant = ws_bwd[i % 3];
    c.layout = i == 5 ? 1 : i == 7 ? 2 : 0;
    cases.push_back(c);
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
  // PyTorch's attn_mask (bool, additive f32, additive in the dtype; broadcast
  // shapes) and dropout, through the dispatcher (the math kernel).
  auto masked = [&](Case c, int mask, std::vector<int64_t> shape, double dropout) {
    c.dispatch = true, c.mask = mask, c.mask_shape = std::move(shape), c.dropout = dropout;
    cases.push_back(c);
  };
  masked({bf, 2, 4, 2, 70, 90, 64, false}, 1, {70, 90}, 0);
  masked({f32, 2, 2, 2, 33, 50, 32, true}, 2, {2, 1, 1, 50}, 0);
  masked({hf, 1, 3, 3, 40, 40, 128, false}, 3, {1, 3, 40, 40}, 0);
  masked({bf, 1, 4, 2, 64, 64, 64, true}, 0, {}, 0.2);
  masked({f32, 2, 2, 1, 30, 45, 48, false}, 2, {30, 45}, 0.1);
  // Strided views: [B, T, H, D] everywhere (GQA, Tq != Tk), and q/k/v/dq/dk/dv
  // as windows of one [B, T, 3, H, D] buffer (the GPT-2 layout), every
  // backward scheme (default, another dK/dV + dQ pair, atomic dQ).
  for (Case c : std::vector<Case>{{bf, 2, 4, 2, 200, 230, 64, true},
                                  {hf, 1, 4, 4, 257, 129, 128, false},
                                  {bf, 2, 4, 4, 300, 300, 64, true},
                                  {bf, 1, 2, 2, 333, 333, 128, true},
                                  {bf, 1, 4, 4, 200, 200, 64, false, false, 3, 4, 3},
                                  {bf, 1, 4, 4, 200, 200, 128, true, false, 6, 6, 0},
                                  {bf, 1, 4, 4, 200, 200, 128, true, false, 9, 8, 0},
                                  {bf, 2, 4, 2, 200, 230, 64, true, false, 10, 9, 0}}) {
    c.layout = c.heads == c.kv_heads && c.seq_q == c.seq_k ? 2 : 1;
    cases.push_back(c);
  }
  {
    Case c{bf, 2, 4, 4, 300, 300, 64, true};
    c.layout = 2, c.dispatch = true, c.deterministic = true;
    cases.push_back(c);
  }
  // cuDNN's fused attention directly: causal or not, GQA, D 64/128, bf16/f16,
  // Tq != Tk, strided [B, T, H, D] storage and the [B, T, 3, H, D] qkv
  // windows, and a run captured into a CUDA graph.
  const absl::Status cudnn_ok = CudnnAvailable();
  if (cudnn_ok.ok()) {
    for (Case c : std::vector<Case>{{bf, 2, 4, 4, 200, 200, 64, false},  {bf, 2, 4, 4, 200, 200, 64, true},
                                    {bf, 1, 4, 2, 333, 333, 128, false}, {bf, 1, 4, 2, 333, 333, 128, true},
                                    {hf, 1, 6, 2, 130, 130, 64, true},   {hf, 1, 2, 2, 256, 256, 128, false},
                                    {bf, 1, 2, 2, 100, 257, 128, false}, {bf, 1, 8, 1, 128, 128, 64, true},
                                    {bf, 2, 4, 2, 256, 256, 128, true}}) {
      c.cudnn = true;
      cases.push_back(c);
    }
    Case strided{bf, 2, 4, 2, 192, 192, 64, true};
    strided.cudnn = true, strided.layout = 1;
    cases.push_back(strided);
    Case qkv{bf, 2, 4, 4, 192, 192, 64, true};
    qkv.cudnn = true, qkv.layout = 2;
    cases.push_back(qkv);
    Case captured{bf, 2, 4, 4, 256, 256, 64, true};
    captured.cudnn = captured.capture = true;
    cases.push_back(captured);
  }
  if (opts.full) {
    cases.push_back({bf, 1, 2, 2, 1024, 1024, 128, true});
    cases.push_back({bf, 2, 4, 1, 777, 777, 64, false});
  }
  std::vector<CheckResult> rows;
  if (!cudnn_ok.ok()) {
    CheckResult r;
    r.name = "cudnn sdpa fwd+bwd: SKIPPED";
    r.dtype = "bf16/f16";
    r.shape = "-";
    r.pass = true;
    r.detail = std::string(cudnn_ok.message());
    rows.push_back(r);
  }
  for (const Case& c : cases) {
    CheckResult r;
    r.name = absl::StrCat(c.cudnn      ? (c.capture ? "cudnn sdpa fwd+bwd in a captured CUDA graph" : "cudnn sdpa fwd+bwd")
                          : c.dispatch ? "sdpa dispatch fwd+bwd"
                                       : "flash_attention fwd+bwd",
                          c.causal ? " causal" : "",
                          c.mask == 0 ? "" : c.mask == 1 ? " bool-mask" : " add-mask",
                          c.dropout > 0 ? absl::StrFormat(" dropout %.1f", c.dropout) : "",
                          c.kv_heads != c.heads ? " gqa" : "", c.deterministic ? " det" : "",
                          c.layout == 1 ? " strided[B,T,H,D]" : c.layout == 2 ? " strided[B,T,3,H,D]" : "",
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
      static char any_mask;
      if (c.mask != 0) sa.attn_mask = &any_mask;  // the key only looks at presence
      sa.dropout_p = static_cast<float>(c.dropout);
      sa.deterministic = c.deterministic;
      if (c.layout != 0) sa.q_strides.row = 3 * c.heads * c.head_dim;  // only strided() matters for the key
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
  AppendInferenceRows(rt, opts.seed, cudnn_ok.ok(), &rows);
  // Packed sequences of different lengths (one empty, Tq != Tk in one).
  struct Varlen {
    DType dt;
    int64_t h, hk, d;
    bool causal;
    std::vector<int64_t> lq, lk;
  };
  for (const Varlen& c : {Varlen{bf, 4, 2, 64, true, {77, 0, 300, 128}, {77, 5, 300, 200}},
                          Varlen{hf, 2, 2, 128, false, {1, 64, 190}, {9, 64, 190}}}) {
    auto r = RunVarlenCheck(rt, opts.seed, c.dt, c.h, c.hk, c.d, c.causal, c.lq, c.lk);
    if (!r.ok()) {
      CheckResult bad;
      bad.name = "flash_attention varlen fwd+bwd";
      bad.rel_err = INFINITY;
      bad.detail = std::string(r.status().message());
      rows.push_back(std::move(bad));
    } else {
      rows.push_back(std::move(*r));
    }
  }
  return rows;
}

}  // namespace loom::kernels::cuda::attention
