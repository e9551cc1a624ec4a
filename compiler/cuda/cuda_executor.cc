// CudaExecutor over the CUDA runtime: turns each planned Launch (plan.h) into a
// closure over fixed device pointers, runs them eagerly once, then captures
// them as one CUDA graph and replays it. See cuda_executor.h.
#include "compiler/cuda/cuda_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/cuda/codegen/pointwise.h"
#include "compiler/cuda/codegen/rowwise.h"
#include "compiler/cuda/lowering_kernels.h"
#include "kernels/cuda/attention/flash_attention.h"
#include "kernels/cuda/attention/sdpa_dispatch.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace loom::compiler::cuda {
namespace {

namespace cg = ::loom::compiler::cuda_codegen;
using Call = std::function<absl::Status()>;

absl::Status CudaErr(int e, absl::string_view what) {
  if (e == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorString(static_cast<cudaError_t>(e))));
}
#define LOOM_CU(expr, what) LOOM_RETURN_IF_ERROR(CudaErr(static_cast<int>(expr), what))

// The multi-tensor grad norm (default) or, with LOOM_CUDA_GRADNORM_MULTI=0, one launch per tensor.
bool GradNormMultiOn() {
  static const bool on = [] {
    const char* v = std::getenv("LOOM_CUDA_GRADNORM_MULTI");
    return !(v && v[0] == '0');
  }();
  return on;
}

kern::Dt ToDt(DType d) {
  switch (d) {
    case DType::kBF16: return kern::kBF16;
    case DType::kI32: return kern::kI32;
    case DType::kI64: return kern::kI64;
    default: return kern::kF32;
  }
}

std::vector<int64_t> Contig(const Shape& s) {
  Strides c = ContiguousStrides(s);
  return std::vector<int64_t>(c.begin(), c.end());
}


class Impl final : public CudaExecutor {
 public:
  ~Impl() override {
    if (profiled_steps_ > 0) PrintProfile();
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    for (void* p : owned_) cudaFree(p);
    for (void* p : pinned_) cudaFreeHost(p);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  absl::Status Init(const Graph& g, const CudaOptions& o) {
    g_ = g;
    o_ = o;
    rowgen_ = RowgenFor(o);
    attention_ = AttnRouteFor(o);
    LOOM_ASSIGN_OR_RETURN(plan_, PlanCuda(g, o.bf16, PlanOptionsFor(o)));
    // Without a device the whole build still runs ("dry": fake addresses, no
    // uploads), so codegen problems surface on machines without a GPU; Init
    // then returns the device error.
    absl::StatusOr<loom::cuda::DeviceRuntime*> rt = loom::cuda::DeviceRuntime::Get(o.device);
    dry_ = !rt.ok();
    if (!dry_) {
      LOOM_RETURN_IF_ERROR((*rt)->MakeCurrent());
      stream_ = static_cast<cudaStream_t>((*rt)->compute_stream());
    }
    loom::cuda::SetGemmAutotune(o.autotune_gemm);
    // Buffers.
    const int ni = static_cast<int>(g.inputs().size());
    input_buf_.assign(ni, nullptr);
    shadow_buf_.assign(ni, nullptr);
    input_set_.assign(ni, false);
    for (int k = 0; k < ni; ++k) {
      const int v = g.inputs()[k].value;
      LOOM_ASSIGN_OR_RETURN(input_buf_[k], Alloc(plan_.Bytes(v)));
      if (plan_.shadow[k] >= 0) {
        LOOM_ASSIGN_OR_RETURN(shadow_buf_[k], Alloc(plan_.Bytes(plan_.shadow[k])));
      }
    }
    shadow_of_.assign(plan_.metas.size(), -1);
    for (int k = 0; k < ni; ++k)
      if (plan_.shadow[k] >= 0) shadow_of_[plan_.shadow[k]] = k;
    LOOM_ASSIGN_OR_RETURN(arena_, Alloc(plan_.arena_bytes));
    // Scratch (shared by every launch: they run in stream order).
    int64_t scratch = 0;
    for (const Launch& l : plan_.launches) scratch = std::max(scratch, ScratchBytes(l));
    LOOM_ASSIGN_OR_RETURN(scratch_, Alloc(scratch));
    scratch_bytes_ = scratch;
    for (const Launch& l : plan_.launches) LOOM_RETURN_IF_ERROR(Build(l));
    return dry_ ? rt.status() : absl::OkStatus();
  }

  absl::Status SetInput(int k, const Tensor& host) override {
    LOOM_RETURN_IF_ERROR(CheckInput(k, host));
    // Copies on the compute stream (non-blocking: the legacy stream would not
    // order against it), then wait so the host tensors may go away.
    Tensor c = host.Contiguous();
    LOOM_CU(cudaMemcpyAsync(input_buf_[k], c.raw_data(), plan_.Bytes(g_.inputs()[k].value), cudaMemcpyHostToDevice,
                            stream_),
            "SetInput: copy");
    Tensor b;
    if (shadow_buf_[k]) {
      b = host.To(DType::kBF16);
      LOOM_CU(cudaMemcpyAsync(shadow_buf_[k], b.raw_data(), b.numel() * 2, cudaMemcpyHostToDevice, stream_),
              "SetInput: shadow");
    }
    LOOM_CU(cudaStreamSynchronize(stream_), "SetInput: sync");
    input_set_[k] = true;
    return absl::OkStatus();
  }

  absl::Status Step(absl::Span<const std::pair<int, Tensor>> step_inputs) override {
    for (const auto& [k, t] : step_inputs) {
      LOOM_RETURN_IF_ERROR(CheckInput(k, t));
      if (shadow_buf_[k]) {  // a parameter given per step: refresh synchronously
        LOOM_RETURN_IF_ERROR(SetInput(k, t));
        continue;
      }
      LOOM_RETURN_IF_ERROR(StageCopy(k, t));
      input_set_[k] = true;
    }
    for (size_t k = 0; k < input_set_.size(); ++k)
      if (!input_set_[k])
        return absl::FailedPreconditionError(
            absl::StrCat("CudaExecutor::Step: input ", k, " (", g_.inputs()[k].name, ") was never set"));
    ++slot_;
    if (!o_.cuda_graph || steps_ == 0 || profile_) {
      LOOM_RETURN_IF_ERROR(RunCalls(profile_ && steps_ > 0));  // step 1 warms up (autotuning)
    } else {
      if (!exec_) {
        absl::Status s = Capture();
        if (!s.ok()) {
          // Nothing captured ran: fall back to eager launches for good, loudly.
          std::fprintf(stderr, "CudaExecutor: CUDA graph capture failed (%s); running eagerly\n",
                       std::string(s.message()).c_str());
          cudaGetLastError();
          o_.cuda_graph = false;
          LOOM_RETURN_IF_ERROR(RunCalls());
          ++steps_;
          return absl::OkStatus();
        }
      }
      LOOM_CU(cudaGraphLaunch(exec_, stream_), "graph launch");
    }
    ++steps_;
    return absl::OkStatus();
  }

  bool graph_replay() const override { return exec_ != nullptr; }

  absl::Status Capture() {
    LOOM_CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), "begin capture");
    absl::Status s = RunCalls();
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (!s.ok() || e != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      return s.ok() ? CudaErr(e, "end capture") : s;
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
      cudaGraphDestroy(graph);
      return CudaErr(e, "graph instantiate");
    }
    graph_ = graph;
    exec_ = exec;
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> Output(int i) override {
    if (i < 0 || i >= static_cast<int>(g_.outputs().size()))
      return absl::InvalidArgumentError(absl::StrCat("Output: i: ", i, " out of range"));
    return ToHost(g_.outputs()[i].value);
  }
  absl::StatusOr<Tensor> OutputDevice(int i) override {
    if (i < 0 || i >= static_cast<int>(g_.outputs().size()))
      return absl::InvalidArgumentError(absl::StrCat("OutputDevice: i: ", i, " out of range"));
    LOOM_CU(cudaStreamSynchronize(stream_), "sync");
    const int v = g_.outputs()[i].value;
    return Tensor::Wrap(Ptr(v), Sh(v), Dt(v), loom::Device::CUDA(o_.device));
  }
  absl::StatusOr<Tensor> Input(int k) override {
    if (k < 0 || k >= static_cast<int>(g_.inputs().size()))
      return absl::InvalidArgumentError(absl::StrCat("Input: k: ", k, " out of range"));
    return ToHost(g_.inputs()[k].value);
  }
  absl::Status Synchronize() override {
    LOOM_CU(cudaStreamSynchronize(stream_), "synchronize");
    return absl::OkStatus();
  }
  std::string Describe() const override {
    std::string s;
    for (size_t i = 0; i < desc_.size(); ++i) absl::StrAppend(&s, i, ": ", desc_[i], "\n");
    // What the SDPA dispatcher picked for each distinct attention shape.
    std::set<std::string> keys;
    for (const AttnCall& c : attn_calls_) {
      const std::string key = loom::cuda::SdpaDispatcher::Key(c.args, c.backward);
      if (keys.insert(key).second)
        absl::StrAppend(&s, "sdpa ", key, " -> ", loom::cuda::SdpaDispatcher::Global().Choice(c.args, c.backward),
                        "\n");
    }
    absl::StrAppend(&s, "arena ", plan_.arena_bytes, " B, device total ", device_bytes_, " B, ",
                    o_.bf16 ? "bf16" : "f32", ", ", exec_ ? "cuda graph (replaying)" : o_.cuda_graph ? "cuda graph (after the first step)" : "eager", "\n");
    return s;
  }
  int64_t device_bytes() const override { return device_bytes_; }
  const CudaPlan& plan() const override { return plan_; }

 private:
  absl::StatusOr<void*> Alloc(int64_t bytes) {
    void* p = nullptr;
    if (bytes <= 0) bytes = 256;
    if (dry_) {
      device_bytes_ += (bytes + 255) / 256 * 256;
      return reinterpret_cast<void*>(uintptr_t{1} << 40 | static_cast<uintptr_t>(device_bytes_));
    }
    LOOM_CU(cudaMalloc(&p, bytes), absl::StrCat("cudaMalloc ", bytes, " bytes"));
    owned_.push_back(p);
    device_bytes_ += bytes;
    return p;
  }

  void* Ptr(int v) const {
    const int r = plan_.root[v];
    if (plan_.input_of[r] >= 0) return input_buf_[plan_.input_of[r]];
    if (shadow_of_[r] >= 0) return shadow_buf_[shadow_of_[r]];
    return static_cast<char*>(arena_) + plan_.offset[r];
  }
  DType Dt(int v) const { return plan_.metas[v].dtype; }
  const Shape& Sh(int v) const { return plan_.metas[v].shape; }
  int64_t Numel(int v) const { return NumElements(Sh(v)); }

  absl::Status CheckInput(int k, const Tensor& t) const {
    if (k < 0 || k >= static_cast<int>(g_.inputs().size()))
      return absl::InvalidArgumentError(absl::StrCat("input: index ", k, " out of range"));
    const TensorMeta& m = g_.meta(g_.inputs()[k].value);
    if (!t.defined() || t.dtype() != m.dtype || t.shape() != m.shape || !t.device().is_cpu())
      return absl::InvalidArgumentError(absl::StrCat("input ", g_.inputs()[k].name, ": expected host ", m.ToString(),
                                                     ", got ", t.defined() ? ops::MetaOf(t).ToString() : "undefined"));
    return absl::OkStatus();
  }

  // Host -> pinned staging (two slots per input) -> device buffer, async.
  absl::Status StageCopy(int k, const Tensor& t) {
    const int64_t bytes = plan_.Bytes(g_.inputs()[k].value);
    auto it = staging_.find(k);
    if (it == staging_.end()) {
      Staging s;
      for (int j = 0; j < 2; ++j) {
        LOOM_CU(cudaMallocHost(&s.host[j], bytes > 0 ? bytes : 1), "cudaMallocHost");
        pinned_.push_back(s.host[j]);
        LOOM_CU(cudaEventCreateWithFlags(&s.done[j], cudaEventDisableTiming), "event");
        events_.push_back(s.done[j]);
      }
      it = staging_.emplace(k, s).first;
    }
    Staging& s = it->second;
    const int j = slot_ & 1;
    LOOM_CU(cudaEventSynchronize(s.done[j]), "staging wait");
    Tensor c = t.Contiguous();
    std::memcpy(s.host[j], c.raw_data(), bytes);
    LOOM_CU(cudaMemcpyAsync(input_buf_[k], s.host[j], bytes, cudaMemcpyHostToDevice, stream_), "input copy");
    LOOM_CU(cudaEventRecord(s.done[j], stream_), "event record");
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> ToHost(int v) {
    LOOM_CU(cudaStreamSynchronize(stream_), "sync");
    Tensor h = Tensor::MustEmpty(Sh(v), Dt(v));
    LOOM_CU(cudaMemcpyAsync(h.raw_data(), Ptr(v), plan_.Bytes(v), cudaMemcpyDeviceToHost, stream_), "copy to host");
    LOOM_CU(cudaStreamSynchronize(stream_), "sync");
    const DType want = g_.meta(v).dtype;
    return want == h.dtype() ? h : h.To(want);
  }

  absl::Status RunCalls(bool profile = false) {
    // Profiling (env LOOM_CUDA_PROFILE, eager steps only): an event between
    // every two launches, summed per launch description after the step.
    std::vector<cudaEvent_t> ev(profile ? calls_.size() + 1 : 0);
    for (cudaEvent_t& e : ev) LOOM_CU(cudaEventCreate(&e), "profile event");
    if (profile) LOOM_CU(cudaEventRecord(ev[0], stream_), "profile event");
    for (size_t i = 0; i < calls_.size(); ++i) {
      absl::Status s = calls_[i]();
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("launch ", i, " (", desc_[i], "): ", s.message()));
      if (profile) LOOM_CU(cudaEventRecord(ev[i + 1], stream_), "profile event");
    }
    if (profile) {
      LOOM_CU(cudaEventSynchronize(ev.back()), "profile sync");
      prof_ms_.resize(calls_.size(), 0.0);
      for (size_t i = 0; i < calls_.size(); ++i) {
        float ms = 0;
        LOOM_CU(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "profile elapsed");
        prof_ms_[i] += ms;
      }
      for (cudaEvent_t e : ev) cudaEventDestroy(e);
      ++profiled_steps_;
    }
    return absl::OkStatus();
  }

  // The profile table on stderr: per launch kind, then the costliest launches
  // (identical descriptions, e.g. the same GEMM in every layer, summed).
  void PrintProfile() const {
    std::map<std::string, std::pair<double, int>> by_kind, by_desc;
    double total = 0;
    for (size_t i = 0; i < prof_ms_.size(); ++i) {
      const double ms = prof_ms_[i] / profiled_steps_;
      total += ms;
      const std::string kind = desc_[i].substr(0, desc_[i].find(' '));
      by_kind[kind].first += ms;
      ++by_kind[kind].second;
      by_desc[desc_[i]].first += ms;
      ++by_desc[desc_[i]].second;
    }
    auto print = [&](const char* title, const std::map<std::string, std::pair<double, int>>& m, size_t top) {
      std::vector<std::pair<double, std::string>> rows;
      for (const auto& [k, v] : m) rows.push_back({v.first, absl::StrCat(k, "  x", v.second)});
      std::sort(rows.rbegin(), rows.rend());
      std::fprintf(stderr, "%s\n", title);
      for (size_t r = 0; r < rows.size() && r < top; ++r)
        std::fprintf(stderr, "  %8.3f ms  %5.1f%%  %s\n", rows[r].first, 100 * rows[r].first / total, rows[r].second.c_str());
    };
    std::fprintf(stderr, "cuda profile: %d eager step(s), %.3f ms of launches per step, %zu launches\n",
                 profiled_steps_, total, prof_ms_.size());
    print("by launch kind:", by_kind, 40);
    print("costliest launches:", by_desc, 30);
  }

  bool UseFlash(const Launch& l) const {
    if (!l.attn.empty()) return true;  // strided views: planned for flash only
    const int q = l.kind == LaunchKind::kSdpa ? l.inputs[0] : l.inputs[1];
    const int64_t d = Sh(q).back();
    return Dt(q) == DType::kBF16 && (d == 64 || d == 128);
  }
  // Attention arguments for a flash-able launch: from the plan's strided views
  // (Launch::attn) or from whole contiguous tensors; every pointer but the
  // workspace is set.
  loom::cuda::SdpaArgs AttnCallArgs(const Launch& l) const {
    const bool bwd = l.kind == LaunchKind::kSdpaBackward;
    loom::cuda::SdpaArgs a;
    a.causal = l.attrs.GetBool("is_causal", false);
    a.scale = l.attrs.Has("scale") ? static_cast<float>(l.attrs.GetFloat("scale", 0)) : 0.f;
    a.deterministic = o_.deterministic || attention_ == AttnRoute::kFlash;
    a.stream = stream_;
    // Views in operand order: [dout,] q, k, v, o[, lse-less dq, dk, dv].
    std::vector<AttnView> w = l.attn;
    if (w.empty()) {
      auto whole = [&](int v) {
        AttnView x;
        x.value = v;
        x.shape = Sh(v);
        return x;  // offset 0, strides 0: contiguous
      };
      const std::vector<int>& in = l.inputs;
      const std::vector<int>& out = l.outputs;
      if (bwd) {
        w = {whole(in[0]), whole(in[1]), whole(in[2]), whole(in[3]), whole(in[4]),
             whole(out[0]), whole(out[1]), whole(out[2])};
      } else {
        w = {whole(in[0]), whole(in[1]), whole(in[2]), whole(out[0])};
      }
    }
    const int base = bwd ? 1 : 0;
    const AttnView& q = w[base];
    const AttnView& k = w[base + 1];
    a.dtype = Dt(q.value);
    a.batch = q.shape[0], a.heads = q.shape[1], a.seq_q = q.shape[2], a.head_dim = q.shape[3];
    a.kv_heads = k.shape[1], a.seq_k = k.shape[2];
    auto ptr = [&](const AttnView& v) {
      return static_cast<char*>(Ptr(v.value)) + v.offset * static_cast<int64_t>(DTypeSize(Dt(v.value)));
    };
    auto strides = [](const AttnView& v) {
      return v.strides.empty() ? loom::cuda::FlashStrides{}
                               : loom::cuda::FlashStrides{v.strides[0], v.strides[1], v.strides[2]};
    };
    a.q = ptr(w[base]), a.k = ptr(w[base + 1]), a.v = ptr(w[base + 2]), a.o = ptr(w[base + 3]);
    a.q_strides = strides(w[base]), a.k_strides = strides(w[base + 1]), a.v_strides = strides(w[base + 2]);
    a.o_strides = strides(w[base + 3]);
    a.lse = static_cast<float*>(Ptr(bwd ? l.inputs[5] : l.outputs[1]));
    if (bwd) {
      a.dout = ptr(w[0]), a.dout_strides = strides(w[0]);
      a.dq = ptr(w[5]), a.dk = ptr(w[6]), a.dv = ptr(w[7]);
      a.dq_strides = strides(w[5]), a.dk_strides = strides(w[6]), a.dv_strides = strides(w[7]);
    }
    return a;
  }
  // One attention launch: Loom's flash kernels with their default variants
  // (AttnRoute::kFlash), or the SDPA dispatcher, which times its candidates
  // (flash variants, cuDNN) in the first, eager step and caches the pick;
  // Describe() reports it.
  void AddAttnCall(const loom::cuda::SdpaArgs& a, bool backward) {
    if (attention_ == AttnRoute::kFlash) {
      const loom::cuda::FlashAttnArgs f = loom::cuda::FlashArgsFromSdpa(a);
      calls_.push_back([f, backward]() {
        return backward ? loom::cuda::FlashAttentionBackward(f) : loom::cuda::FlashAttentionForward(f);
      });
      return;
    }
    attn_calls_.push_back({desc_.size(), a, backward});
    calls_.push_back([a, backward]() {
      loom::cuda::SdpaDispatcher& d = loom::cuda::SdpaDispatcher::Global();
      return backward ? d.Backward(a) : d.Forward(a);
    });
  }
  // The simple (f32 or odd head_dim) kernels' arguments: contiguous q, k, v.
  kern::AttnArgs SimpleArgs(const Launch& l, int q, int k, int v) const {
    kern::AttnArgs a;
    a.dtype = ToDt(Dt(q));
    a.batch = Sh(q)[0];
    a.heads = Sh(q)[1];
    a.seq_q = Sh(q)[2];
    a.head_dim = Sh(q)[3];
    a.kv_heads = Sh(k)[1];
    a.seq_k = Sh(k)[2];
    a.causal = l.attrs.GetBool("is_causal", false);
    a.scale = l.attrs.Has("scale") ? static_cast<float>(l.attrs.GetFloat("scale", 0)) : 0.f;
    a.q = Ptr(q);
    a.k = Ptr(k);
    a.v = Ptr(v);
    return a;
  }

  int64_t ScratchBytes(const Launch& l) const {
    switch (l.kind) {
      case LaunchKind::kLayerNormBackward: {
        const int64_t cols = Sh(l.inputs[1]).back(), rows = Numel(l.inputs[1]) / std::max<int64_t>(cols, 1);
        return 4 * loom::cuda::LayerNormBwdWorkspaceFloats(rows, cols);
      }
      case LaunchKind::kSumTo: {
        const int64_t cols = Numel(l.outputs[0]), rows = Numel(l.inputs[0]) / std::max<int64_t>(cols, 1);
        return 4 * kern::SumRowsWorkspaceFloats(rows, cols);
      }
      case LaunchKind::kRmsNormBackward: {
        const int64_t cols = Sh(l.inputs[1]).back(), rows = Numel(l.inputs[1]) / std::max<int64_t>(cols, 1);
        return 4 * kern::SumRowsWorkspaceFloats(rows, cols);
      }
      case LaunchKind::kGemm:  // kDGeluBgrad's fallback: column sums
        return l.gemm.epilogue == GemmEpilogue::kDGeluBgrad ? 4 * kern::SumRowsWorkspaceFloats(l.gemm.m, l.gemm.n) : 0;
      case LaunchKind::kGradNorm: {
        int64_t t = 0;
        for (int v : l.inputs) t += GradNormMultiOn() ? kern::GradNormChunks(Numel(v)) : kern::GradNormPartials(Numel(v));
        return 4 * std::max<int64_t>(t, 1);
      }
      case LaunchKind::kCrossEntropy: return 4 * Sh(l.inputs[0])[0];
      case LaunchKind::kCrossEntropyBackward: return 256;
      case LaunchKind::kCrossEntropyFused: return 4 * (Sh(l.inputs[1])[0] + 1);
      case LaunchKind::kSdpa:
      case LaunchKind::kSdpaBackward: {
        const bool bwd = l.kind == LaunchKind::kSdpaBackward;
        if (!UseFlash(l)) return bwd ? 4 * Numel(l.inputs[1]) / Sh(l.inputs[1]).back() : 0;
        const loom::cuda::SdpaArgs a = AttnCallArgs(l);
        if (attention_ == AttnRoute::kFlash || dry_)  // dry: no device to build cuDNN plans on
          return bwd ? loom::cuda::SdpaBackwardWorkspaceBytes(a) : 0;
        return loom::cuda::SdpaWorkspaceBytes(a, bwd);  // builds cuDNN's plan now, outside capture
      }
      default: return 0;
    }
  }

  // A strided copy/cast through codegen (empty body).
  absl::StatusOr<Call> CopyCall(int in, int64_t in_offset, std::vector<int64_t> in_strides, Shape out_shape,
                                int out, int64_t out_offset, std::vector<int64_t> out_strides) {
    auto body = std::make_unique<Graph>("copy");
    const int x = body->AddInput("x", {g_dtype_or(in), out_shape});
    body->AddOutput(x);
    cg::PwSpec spec;
    spec.body = body.get();
    spec.inputs = {{Dt(in), std::move(in_strides), in_offset}};
    spec.out_shape = std::vector<int64_t>(out_shape.begin(), out_shape.end());
    spec.out_dtype = Dt(out);
    spec.out_strides = std::move(out_strides);
    spec.out_offset = out_offset;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::PointwiseKernel> k, cg::PointwiseKernel::Compile(spec));
    const cg::PointwiseKernel* kp = k.get();
    kernels_.push_back(std::move(k));
    bodies_.push_back(std::move(body));
    const void* src = Ptr(in);
    void* dst = Ptr(out);
    cudaStream_t s = stream_;
    return Call([kp, src, dst, s]() { return kp->Launch({src}, dst, s); });
  }
  DType g_dtype_or(int v) const { return v < static_cast<int>(g_.values().size()) ? g_.meta(v).dtype : Dt(v); }

  absl::Status Build(const Launch& l) {
    std::string desc = absl::StrCat(LaunchKindName(l.kind), " ", l.op);
    std::vector<std::string> dts;
    int64_t bytes = 0;
    for (int v : l.inputs) {
      dts.push_back(std::string(DTypeName(Dt(v))));
      bytes += plan_.Bytes(v);
    }
    dts.push_back("->");
    for (int v : l.outputs) {
      dts.push_back(std::string(DTypeName(Dt(v))));
      bytes += plan_.Bytes(v);
    }
    absl::StrAppend(&desc, " [", absl::StrJoin(dts, " "), "] ", bytes, "B");
    cudaStream_t s = stream_;
    void* scratch = scratch_;
    const auto& in = l.inputs;
    const auto& out = l.outputs;
    LOOM_ASSIGN_OR_RETURN(const bool generated, BuildRowwise(l, &desc));
    if (generated) {
      desc_.push_back(std::move(desc));
      return absl::OkStatus();
    }
    switch (l.kind) {
      case LaunchKind::kGemm: {
        const GemmPlan& m = l.gemm;
        loom::cuda::GemmArgs ga;
        ga.dtype = m.ab_dtype;
        ga.m = m.m;
        ga.n = m.n;
        ga.k = m.k;
        ga.trans_a = m.trans_a;
        ga.trans_b = m.trans_b;
        ga.a = Ptr(in[0]);
        ga.b = Ptr(in[1]);
        ga.d = Ptr(out[0]);
        ga.d_f32 = m.ab_dtype == DType::kBF16 && m.d_dtype == DType::kF32;
        ga.stream = s;
        switch (m.epilogue) {
          case GemmEpilogue::kNone: break;
          case GemmEpilogue::kBias:
            ga.epilogue = loom::cuda::Epilogue::kBias;
            ga.bias = Ptr(in[2]);
            break;
          case GemmEpilogue::kBiasGeluAux:
            ga.epilogue = loom::cuda::Epilogue::kBiasGeluAux;
            ga.bias = Ptr(in[2]);
            ga.aux = Ptr(out[1]);
            break;
          case GemmEpilogue::kDGelu:
            ga.epilogue = loom::cuda::Epilogue::kDGelu;
            ga.aux = const_cast<void*>(Ptr(in[2]));
            break;
          case GemmEpilogue::kDGeluBgrad:
            ga.epilogue = loom::cuda::Epilogue::kDGeluBgrad;
            ga.aux = const_cast<void*>(Ptr(in[2]));
            ga.bias_grad = Ptr(out[1]);
            break;
        }
        absl::StrAppend(&desc, " m=", m.m, " n=", m.n, " k=", m.k, " tA=", m.trans_a, " tB=", m.trans_b,
                        " epi=", GemmEpilogueName(m.epilogue), m.batch > 1 ? absl::StrCat(" batch=", m.batch) : "");
        const int64_t ea = DTypeSize(m.ab_dtype), ed = DTypeSize(m.d_dtype);
        const GemmPlan mp = m;
        float* ws = static_cast<float*>(scratch);
        const kern::Dt bdt = ToDt(m.d_dtype);
        calls_.push_back([ga, mp, ea, ed, ws, bdt, s]() {
          for (int64_t b = 0; b < mp.batch; ++b) {
            loom::cuda::GemmArgs x = ga;
            x.a = static_cast<const char*>(ga.a) + b * mp.stride_a * ea;
            x.b = static_cast<const char*>(ga.b) + b * mp.stride_b * ea;
            x.d = static_cast<char*>(ga.d) + b * mp.stride_d * ed;
            absl::Status st = loom::cuda::Gemm(x);
            if (st.code() == absl::StatusCode::kUnimplemented && x.epilogue == loom::cuda::Epilogue::kDGeluBgrad) {
              // No cuBLASLt algorithm with the fused bias gradient: dgelu, then column sums.
              x.epilogue = loom::cuda::Epilogue::kDGelu;
              x.bias_grad = nullptr;
              LOOM_RETURN_IF_ERROR(loom::cuda::Gemm(x));
              st = CudaErr(kern::SumRows(bdt, bdt, mp.m, mp.n, x.d, ga.bias_grad, ws, s), "dgelu bias grad");
            }
            LOOM_RETURN_IF_ERROR(st);
          }
          return absl::OkStatus();
        });
        break;
      }
      case LaunchKind::kPointwise: {
        const Node& n = g_.nodes()[l.node];
        const Graph* body = nullptr;
        if (n.op == kFusedOp) {
          body = n.subgraph.get();
        } else {
          std::vector<TensorMeta> metas;
          for (int v : n.inputs) metas.push_back(g_.meta(v));
          LOOM_ASSIGN_OR_RETURN(Graph b, cg::MakeSingleOpBody(n.op, n.attrs, metas));
          bodies_.push_back(std::make_unique<Graph>(std::move(b)));
          body = bodies_.back().get();
        }
        cg::PwSpec spec;
        spec.body = body;
        const Shape& os = Sh(out[0]);
        for (int v : in) spec.inputs.push_back({Dt(v), cg::BroadcastStrides(Sh(v), os), 0});
        spec.out_shape = std::vector<int64_t>(os.begin(), os.end());
        spec.out_dtype = Dt(out[0]);
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::PointwiseKernel> k, cg::PointwiseKernel::Compile(spec));
        const cg::PointwiseKernel* kp = k.get();
        kernels_.push_back(std::move(k));
        std::vector<const void*> ptrs;
        for (int v : in) ptrs.push_back(Ptr(v));
        void* dst = Ptr(out[0]);
        calls_.push_back([kp, ptrs, dst, s]() { return kp->Launch(ptrs, dst, s); });
        break;
      }
      case LaunchKind::kCopy: {
        const CopyGeom& c = l.copies.at(0);
        LOOM_ASSIGN_OR_RETURN(Call call, CopyCall(in[0], c.src_offset, c.src_strides, c.shape, out[0], c.dst_offset,
                                                  c.dst_strides));
        calls_.push_back(std::move(call));
        break;
      }
      case LaunchKind::kSliceBackward: {
        const CopyGeom& c = l.copies.at(0);
        LOOM_ASSIGN_OR_RETURN(Call call, CopyCall(in[0], c.src_offset, c.src_strides, c.shape, out[0], c.dst_offset,
                                                  c.dst_strides));
        void* dst = Ptr(out[0]);
        const int64_t nb = plan_.Bytes(out[0]);
        calls_.push_back([call, dst, nb, s]() {
          LOOM_CU(cudaMemsetAsync(dst, 0, nb, s), "slice_backward: zero");
          return call();
        });
        break;
      }
      case LaunchKind::kConcat: {
        std::vector<Call> parts;
        for (size_t k = 0; k < in.size(); ++k) {
          const CopyGeom& c = l.copies.at(k);
          LOOM_ASSIGN_OR_RETURN(Call call, CopyCall(in[k], c.src_offset, c.src_strides, c.shape, out[0],
                                                    c.dst_offset, c.dst_strides));
          parts.push_back(std::move(call));
        }
        calls_.push_back([parts]() {
          for (const Call& c : parts) LOOM_RETURN_IF_ERROR(c());
          return absl::OkStatus();
        });
        break;
      }
      case LaunchKind::kFill: {
        const kern::Dt dt = ToDt(Dt(out[0]));
        const int64_t n = Numel(out[0]);
        const double value = l.attrs.GetFloat("value", 0.0);
        void* dst = Ptr(out[0]);
        calls_.push_back([=]() { return CudaErr(kern::Fill(dt, n, value, dst, s), "fill"); });
        break;
      }
      case LaunchKind::kEmbedding: {
        const kern::Dt wdt = ToDt(Dt(in[0])), odt = ToDt(Dt(out[0])), idt = ToDt(Dt(in[1]));
        const int64_t rows = Numel(in[1]), cols = Sh(in[0])[1], vocab = Sh(in[0])[0];
        const void* w = Ptr(in[0]);
        const void* ids = Ptr(in[1]);
        void* o = Ptr(out[0]);
        calls_.push_back([=]() { return CudaErr(kern::Embedding(wdt, odt, idt, rows, cols, vocab, w, ids, o, s), "embedding"); });
        break;
      }
      case LaunchKind::kEmbeddingBackward: {
        const kern::Dt ddt = ToDt(Dt(in[0])), idt = ToDt(Dt(in[1]));
        const int64_t rows = Numel(in[1]), cols = Sh(out[0])[1], vocab = Sh(out[0])[0];
        const void* dy = Ptr(in[0]);
        const void* ids = Ptr(in[1]);
        float* o = static_cast<float*>(Ptr(out[0]));
        calls_.push_back(
            [=]() { return CudaErr(kern::EmbeddingBackward(ddt, idt, rows, cols, vocab, dy, ids, o, s), "embedding_backward"); });
        break;
      }
      case LaunchKind::kSumTo: {
        const kern::Dt xdt = ToDt(Dt(in[0])), odt = ToDt(Dt(out[0]));
        const int64_t cols = Numel(out[0]), rows = Numel(in[0]) / std::max<int64_t>(cols, 1);
        const void* x = Ptr(in[0]);
        void* o = Ptr(out[0]);
        float* ws = static_cast<float*>(scratch);
        calls_.push_back([=]() { return CudaErr(kern::SumRows(xdt, odt, rows, cols, x, o, ws, s), "sum_to"); });
        break;
      }
      case LaunchKind::kLayerNorm: {
        loom::cuda::LayerNormFwdArgs a;
        a.dtype = Dt(in[0]);
        a.cols = Sh(in[0]).back();
        a.rows = Numel(in[0]) / a.cols;
        a.x = Ptr(in[0]);
        a.weight = static_cast<const float*>(Ptr(in[1]));
        a.bias = static_cast<const float*>(Ptr(in[2]));
        a.y = Ptr(out[0]);
        a.mean = static_cast<float*>(Ptr(out[1]));
        a.rstd = static_cast<float*>(Ptr(out[2]));
        a.eps = static_cast<float>(l.attrs.GetFloat("eps", 1e-5));
        a.stream = s;
        calls_.push_back([a]() { return loom::cuda::LayerNormForward(a); });
        break;
      }
      case LaunchKind::kLayerNormBackward: {
        loom::cuda::LayerNormBwdArgs a;
        a.dtype = Dt(in[0]);
        a.cols = Sh(in[1]).back();
        a.rows = Numel(in[1]) / a.cols;
        a.dy = Ptr(in[0]);
        a.x = Ptr(in[1]);
        a.weight = static_cast<const float*>(Ptr(in[2]));
        a.mean = static_cast<const float*>(Ptr(in[3]));
        a.rstd = static_cast<const float*>(Ptr(in[4]));
        a.dx = Ptr(out[0]);
        a.dweight = static_cast<float*>(Ptr(out[1]));
        a.dbias = static_cast<float*>(Ptr(out[2]));
        a.workspace = static_cast<float*>(scratch);
        if (in.size() > 5) a.dresidual = Ptr(in[5]);  // layernorm_backward+add
        if (out.size() > 3) a.dx_colsum = static_cast<float*>(Ptr(out[3]));  // ...+sum_to
        a.stream = s;
        calls_.push_back([a]() { return loom::cuda::LayerNormBackward(a); });
        break;
      }
      case LaunchKind::kRmsNorm: {
        const kern::Dt dt = ToDt(Dt(in[0]));
        const int64_t cols = Sh(in[0]).back(), rows = Numel(in[0]) / std::max<int64_t>(cols, 1);
        const double eps = l.attrs.GetFloat("eps", 1e-6);
        const void* x = Ptr(in[0]);
        const float* w = static_cast<const float*>(Ptr(in[1]));
        void* y = Ptr(out[0]);
        float* rstd = static_cast<float*>(Ptr(out[1]));
        calls_.push_back([=]() { return CudaErr(kern::RmsNormForward(dt, rows, cols, x, w, eps, y, rstd, s), "rmsnorm"); });
        break;
      }
      case LaunchKind::kRmsNormBackward: {
        const kern::Dt dt = ToDt(Dt(in[0]));
        const int64_t cols = Sh(in[1]).back(), rows = Numel(in[1]) / std::max<int64_t>(cols, 1);
        const void* dy = Ptr(in[0]);
        const void* x = Ptr(in[1]);
        const float* w = static_cast<const float*>(Ptr(in[2]));
        const float* rstd = static_cast<const float*>(Ptr(in[3]));
        void* dx = Ptr(out[0]);
        float* dw = static_cast<float*>(Ptr(out[1]));
        float* ws = static_cast<float*>(scratch);
        calls_.push_back([=]() {
          return CudaErr(kern::RmsNormBackward(dt, rows, cols, dy, x, w, rstd, dx, dw, ws, s), "rmsnorm_backward");
        });
        break;
      }
      case LaunchKind::kRope: {
        const kern::Dt dt = ToDt(Dt(in[0]));
        const Shape& sh = Sh(in[0]);
        const int64_t B = sh[0], T = sh[1], H = sh[2], D = sh[3];
        const double theta = l.attrs.GetFloat("theta", 10000.0);
        const int64_t offset = l.attrs.GetInt("offset", 0);
        const bool inverse = l.attrs.GetBool("inverse", false);
        const void* x = Ptr(in[0]);
        void* y = Ptr(out[0]);
        calls_.push_back([=]() { return CudaErr(kern::Rope(dt, B, T, H, D, theta, offset, inverse, x, y, s), "rope"); });
        break;
      }
      case LaunchKind::kCrossEntropy: {
        const kern::Dt ldt = ToDt(Dt(in[0])), tdt = ToDt(Dt(in[1]));
        const int64_t rows = Sh(in[0])[0], vocab = Sh(in[0])[1];
        const int64_t ignore = l.attrs.GetInt("ignore_index", -100);
        const void* lg = Ptr(in[0]);
        const void* t = Ptr(in[1]);
        float* loss = static_cast<float*>(Ptr(out[0]));
        float* lse = static_cast<float*>(Ptr(out[1]));
        float* rl = static_cast<float*>(scratch);
        calls_.push_back([=]() {
          return CudaErr(kern::CrossEntropyForward(ldt, tdt, rows, vocab, lg, t, ignore, lse, rl, loss, s), "cross_entropy");
        });
        break;
      }
      case LaunchKind::kCrossEntropyBackward: {
        const kern::Dt ldt = ToDt(Dt(in[1])), tdt = ToDt(Dt(in[2]));
        const int64_t rows = Sh(in[1])[0], vocab = Sh(in[1])[1];
        const int64_t ignore = l.attrs.GetInt("ignore_index", -100);
        const float* dl = static_cast<const float*>(Ptr(in[0]));
        const void* lg = Ptr(in[1]);
        const void* t = Ptr(in[2]);
        const float* lse = static_cast<const float*>(Ptr(in[3]));
        void* o = Ptr(out[0]);
        float* ws = static_cast<float*>(scratch);
        calls_.push_back([=]() {
          return CudaErr(kern::CrossEntropyBackward(ldt, tdt, rows, vocab, dl, lg, t, lse, ignore, o, ws, s),
                         "cross_entropy_backward");
        });
        break;
      }
      case LaunchKind::kCrossEntropyFused: {  // inputs dloss, logits, targets; outputs loss, lse, dlogits
        const kern::Dt ldt = ToDt(Dt(in[1])), tdt = ToDt(Dt(in[2]));
        const int64_t rows = Sh(in[1])[0], vocab = Sh(in[1])[1];
        const int64_t ignore = l.attrs.GetInt("ignore_index", -100);
        const float* dl = static_cast<const float*>(Ptr(in[0]));
        const void* lg = Ptr(in[1]);
        const void* t = Ptr(in[2]);
        float* loss = static_cast<float*>(Ptr(out[0]));
        float* lse = static_cast<float*>(Ptr(out[1]));
        void* o = Ptr(out[2]);
        float* ws = static_cast<float*>(scratch);
        calls_.push_back([=]() {
          return CudaErr(kern::CrossEntropyFused(ldt, tdt, rows, vocab, dl, lg, t, ignore, lse, loss, o, ws, s),
                         "cross_entropy_fused");
        });
        break;
      }
      case LaunchKind::kSdpa: {
        if (UseFlash(l)) {
          loom::cuda::SdpaArgs a = AttnCallArgs(l);
          a.workspace = scratch;
          a.workspace_bytes = scratch_bytes_;
          desc += attention_ == AttnRoute::kFlash ? " flash" : " dispatch";
          AddAttnCall(a, false);
        } else {
          kern::AttnArgs a = SimpleArgs(l, in[0], in[1], in[2]);
          a.o = Ptr(out[0]);
          a.lse = static_cast<float*>(Ptr(out[1]));
          absl::StrAppend(&desc, " simple");
          calls_.push_back([a, s]() { return CudaErr(kern::AttentionForward(a, s), "sdpa"); });
        }
        break;
      }
      case LaunchKind::kSdpaBackward: {
        if (UseFlash(l)) {
          loom::cuda::SdpaArgs a = AttnCallArgs(l);
          a.workspace = scratch;
          a.workspace_bytes = scratch_bytes_;
          desc += attention_ == AttnRoute::kFlash ? " flash" : " dispatch";
          AddAttnCall(a, true);
        } else {
          kern::AttnArgs a = SimpleArgs(l, in[1], in[2], in[3]);
          a.dout = Ptr(in[0]);
          a.o = Ptr(in[4]);
          a.lse = static_cast<float*>(Ptr(in[5]));
          a.dq = Ptr(out[0]);
          a.dk = Ptr(out[1]);
          a.dv = Ptr(out[2]);
          a.workspace = static_cast<float*>(scratch);
          absl::StrAppend(&desc, " simple");
          calls_.push_back([a, s]() { return CudaErr(kern::AttentionBackward(a, s), "sdpa_backward"); });
        }
        break;
      }
      case LaunchKind::kGradNorm: {
        if (!GradNormMultiOn()) {  // LOOM_CUDA_GRADNORM_MULTI=0: one launch per tensor (A/B timing)
          struct Part {
            kern::Dt dt;
            int64_t n;
            const void* x;
            float* partials;
          };
          std::vector<Part> parts;
          float* ws = static_cast<float*>(scratch);
          int64_t off = 0;
          for (int v : in) {
            parts.push_back({ToDt(Dt(v)), Numel(v), Ptr(v), ws + off});
            off += kern::GradNormPartials(Numel(v));
          }
          float* o = static_cast<float*>(Ptr(out[0]));
          calls_.push_back([parts, ws, total = off, o, s]() {
            for (const Part& p : parts)
              LOOM_RETURN_IF_ERROR(CudaErr(kern::SumSquaresPartial(p.dt, p.n, p.x, p.partials, s), "grad_norm"));
            return CudaErr(kern::SqrtSum(ws, total, o, s), "grad_norm");
          });
          break;
        }
        // One multi-tensor launch over every gradient's chunks, then a fixed-order sqrt-sum.
        std::vector<kern::GradNormEntry> entries;
        for (int v : in) {
          kern::GradNormEntry e;
          e.x = Ptr(v);
          e.numel = Numel(v);
          e.dt = ToDt(Dt(v));
          entries.push_back(e);
        }
        void* dev_entries = nullptr;
        void* dev_chunks = nullptr;
        int64_t chunks = 0;
        if (!dry_) {
          LOOM_CU(kern::GradNormUpload(entries.data(), static_cast<int>(entries.size()), &dev_entries, &dev_chunks,
                                       &chunks),
                  "grad_norm: upload");
          owned_.push_back(dev_entries);
          owned_.push_back(dev_chunks);
        }
        float* ws = static_cast<float*>(scratch);
        float* o = static_cast<float*>(Ptr(out[0]));
        absl::StrAppend(&desc, " tensors=", entries.size(), " chunks=", chunks);
        calls_.push_back([dev_entries, dev_chunks, chunks, ws, o, s]() {
          return CudaErr(kern::GradNormMulti(dev_entries, dev_chunks, chunks, ws, o, s), "grad_norm");
        });
        break;
      }
      case LaunchKind::kAdamW: {
        std::vector<kern::AdamWEntry> entries;
        const int nt = static_cast<int>(l.nodes.size());
        for (int t = 0; t < nt; ++t) {
          const Node& an = g_.nodes()[l.nodes[t]];
          kern::AdamWEntry e;
          e.param = static_cast<float*>(Ptr(in[4 * t]));
          e.grad = Ptr(in[4 * t + 1]);
          e.grad_bf16 = Dt(in[4 * t + 1]) == DType::kBF16;
          e.m = static_cast<float*>(Ptr(in[4 * t + 2]));
          e.v = static_cast<float*>(Ptr(in[4 * t + 3]));
          e.numel = Numel(in[4 * t]);
          e.weight_decay = an.attrs.GetFloat("weight_decay", 0.01);
          const int k = plan_.input_of[in[4 * t]];
          e.param_bf16 = k >= 0 ? shadow_buf_[k] : nullptr;
          entries.push_back(e);
        }
        void* dev_entries = nullptr;
        void* dev_chunks = nullptr;
        int64_t chunks = 0;
        if (!dry_) {
          LOOM_CU(kern::AdamWUpload(entries.data(), nt, &dev_entries, &dev_chunks, &chunks), "adamw: upload");
          owned_.push_back(dev_entries);
          owned_.push_back(dev_chunks);
        }
        kern::AdamWConsts c;
        c.beta1 = l.attrs.GetFloat("beta1", 0.9);
        c.beta2 = l.attrs.GetFloat("beta2", 0.999);
        c.eps = l.attrs.GetFloat("eps", 1e-8);
        c.max_norm = l.attrs.GetFloat("max_norm", 0.0);
        const int base = 4 * nt;
        c.grad_norm = static_cast<const float*>(Ptr(in[base]));
        c.lr = static_cast<const float*>(Ptr(in[base + 1]));
        c.step = Ptr(in[base + 2]);
        const DType sdt = Dt(in[base + 2]);
        c.step_dtype = sdt == DType::kI32 ? 1 : sdt == DType::kI64 ? 2 : 0;
        absl::StrAppend(&desc, " tensors=", nt, " chunks=", chunks);
        calls_.push_back([dev_entries, dev_chunks, chunks, c, s]() {
          return CudaErr(kern::AdamWStep(dev_entries, dev_chunks, chunks, c, s), "adamw");
        });
        break;
      }
      case LaunchKind::kCopyBack: {
        const int k = l.copy_back_input;
        const int iv = g_.inputs()[k].value;
        if (Dt(in[0]) != Dt(iv)) {
          LOOM_ASSIGN_OR_RETURN(Call c, CopyCall(in[0], 0, Contig(Sh(in[0])), Sh(in[0]), iv, 0, {}));
          calls_.push_back(std::move(c));
        } else {
          const void* src = Ptr(in[0]);
          void* dst = input_buf_[k];
          const int64_t nb = plan_.Bytes(iv);
          calls_.push_back([=]() {
            LOOM_CU(cudaMemcpyAsync(dst, src, nb, cudaMemcpyDeviceToDevice, s), "copy_back");
            return absl::OkStatus();
          });
        }
        if (shadow_buf_[k]) {
          float* src = static_cast<float*>(input_buf_[k]);
          void* dst = shadow_buf_[k];
          const int64_t n = Numel(iv);
          auto prev = calls_.back();
          calls_.back() = [=]() {
            LOOM_RETURN_IF_ERROR(prev());
            return CudaErr(kern::CastF32ToBF16(n, src, dst, s), "copy_back: shadow");
          };
        }
        break;
      }
    }
    desc_.push_back(std::move(desc));
    return absl::OkStatus();
  }

  // The generated row-wise kernels (codegen/rowwise.h) for layernorm (always
  // for the add+layernorm launch), cross-entropy and AdamW when rowgen_
  // selects them. False: not handled here (the hand-written kernels run).
  absl::StatusOr<bool> BuildRowwise(const Launch& l, std::string* desc) {
    const auto& in = l.inputs;
    const auto& out = l.outputs;
    cudaStream_t s = stream_;
    switch (l.kind) {
      case LaunchKind::kLayerNorm: {
        const bool fused = in.size() > 3;  // {addends.., weight, bias} -> {sum, y, mean, rstd}
        if (!fused && !rowgen_.layernorm) return false;
        const int y = out[fused ? 1 : 0];
        const size_t na = in.size() - 2;
        cg::LnSpec sp;
        sp.cols = Sh(y).back();
        const int64_t rows = Numel(y) / std::max<int64_t>(sp.cols, 1);
        sp.dtype = Dt(y);
        sp.eps = l.attrs.GetFloat("eps", 1e-5);
        if (fused)
          for (size_t q = 0; q < na; ++q)
            sp.addends.push_back({Dt(in[q]), Numel(in[q]) == rows * sp.cols ? 0 : Numel(in[q]) / sp.cols});
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::RowwiseKernel> k, cg::RowwiseKernel::LayerNorm(sp));
        cg::LnParams p;
        for (size_t q = 0; q < (fused ? na : 1); ++q) p.in[q] = Ptr(in[q]);
        p.gamma = static_cast<const float*>(Ptr(in[na]));
        p.beta = static_cast<const float*>(Ptr(in[na + 1]));
        p.h = fused ? Ptr(out[0]) : nullptr;
        p.y = Ptr(y);
        p.mean = static_cast<float*>(Ptr(out[fused ? 2 : 1]));
        p.rstd = static_cast<float*>(Ptr(out[fused ? 3 : 2]));
        p.rows = rows;
        const cg::RowwiseKernel* kp = k.get();
        row_kernels_.push_back(std::move(k));
        absl::StrAppend(desc, " generated");
        calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
        return true;
      }
      case LaunchKind::kCrossEntropy:
      case LaunchKind::kCrossEntropyBackward: {
        if (!rowgen_.cross_entropy) return false;
        const bool fwd = l.kind == LaunchKind::kCrossEntropy;
        const int lg = in[fwd ? 0 : 1], tg = in[fwd ? 1 : 2];
        cg::CeSpec sp;
        sp.vocab = Sh(lg)[1];
        sp.dtype = Dt(lg);
        sp.target_dtype = Dt(tg);
        sp.ignore_index = l.attrs.GetInt("ignore_index", -100);
        const int64_t rows = Sh(lg)[0];
        auto k = fwd ? cg::RowwiseKernel::CeForward(sp) : cg::RowwiseKernel::CeBackward(sp);
        if (absl::IsInvalidArgument(k.status())) return false;  // e.g. f32 targets: the hand-written kernel
        LOOM_RETURN_IF_ERROR(k.status());
        const cg::RowwiseKernel* kp = k->get();
        row_kernels_.push_back(std::move(*k));
        absl::StrAppend(desc, " generated");
        if (fwd) {
          // The forward's last block re-arms its counter: it needs its own zeroed word.
          LOOM_ASSIGN_OR_RETURN(void* counter, Alloc(256));
          if (!dry_) LOOM_CU(cudaMemset(counter, 0, 256), "cross_entropy: counter");
          cg::CeFwdParams p{Ptr(lg), Ptr(tg), static_cast<float*>(Ptr(out[1])), static_cast<float*>(scratch_),
                            static_cast<float*>(Ptr(out[0])), static_cast<unsigned*>(counter), rows};
          calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
        } else {
          cg::CeBwdParams p{static_cast<const float*>(Ptr(in[0])), Ptr(lg), Ptr(tg),
                            static_cast<const float*>(Ptr(in[3])), Ptr(out[0]), static_cast<float*>(scratch_), rows};
          calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
        }
        return true;
      }
      case LaunchKind::kAdamW: {
        if (!rowgen_.adamw) return false;
        const int nt = static_cast<int>(l.nodes.size());
        const int base = 4 * nt;
        cg::AdamWSpec sp;
        sp.beta1 = l.attrs.GetFloat("beta1", 0.9);
        sp.beta2 = l.attrs.GetFloat("beta2", 0.999);
        sp.eps = l.attrs.GetFloat("eps", 1e-8);
        sp.max_norm = l.attrs.GetFloat("max_norm", 0.0);
        sp.step_dtype = Dt(in[base + 2]);
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::RowwiseKernel> k, cg::RowwiseKernel::AdamW(sp));
        std::vector<cg::AdamWTensor> tensors;
        for (int t = 0; t < nt; ++t) {
          cg::AdamWTensor e;
          e.param = static_cast<float*>(Ptr(in[4 * t]));
          e.grad = Ptr(in[4 * t + 1]);
          e.grad_bf16 = Dt(in[4 * t + 1]) == DType::kBF16;
          e.m = static_cast<float*>(Ptr(in[4 * t + 2]));
          e.v = static_cast<float*>(Ptr(in[4 * t + 3]));
          e.numel = Numel(in[4 * t]);
          e.weight_decay = g_.nodes()[l.nodes[t]].attrs.GetFloat("weight_decay", 0.01);
          const int ki = plan_.input_of[in[4 * t]];
          e.param_bf16 = ki >= 0 ? shadow_buf_[ki] : nullptr;
          tensors.push_back(e);
        }
        std::vector<cg::AdamWChunk> chunks = cg::AdamWTable(tensors);
        const int64_t tb = sizeof(cg::AdamWTensor) * tensors.size(), cb = sizeof(cg::AdamWChunk) * chunks.size();
        LOOM_ASSIGN_OR_RETURN(void* dt, Alloc(tb));
        LOOM_ASSIGN_OR_RETURN(void* dc, Alloc(cb));
        if (!dry_) {
          LOOM_CU(cudaMemcpy(dt, tensors.data(), tb, cudaMemcpyHostToDevice), "adamw: tensor table");
          LOOM_CU(cudaMemcpy(dc, chunks.data(), cb, cudaMemcpyHostToDevice), "adamw: chunk table");
        }
        cg::AdamWParams p{static_cast<const cg::AdamWTensor*>(dt), static_cast<const cg::AdamWChunk*>(dc),
                          static_cast<const float*>(Ptr(in[base + 1])), Ptr(in[base + 2]),
                          static_cast<const float*>(Ptr(in[base])), static_cast<int64_t>(chunks.size())};
        const cg::RowwiseKernel* kp = k.get();
        row_kernels_.push_back(std::move(k));
        absl::StrAppend(desc, " generated tensors=", nt, " chunks=", chunks.size());
        calls_.push_back([kp, p, s]() { return kp->Launch(p, s); });
        return true;
      }
      default: return false;
    }
  }

  struct Staging {
    void* host[2] = {nullptr, nullptr};
    cudaEvent_t done[2] = {nullptr, nullptr};
  };

  Graph g_;
  CudaOptions o_;
  CudaPlan plan_;
  cudaStream_t stream_ = nullptr;
  bool dry_ = false;
  std::vector<void*> input_buf_, shadow_buf_;
  std::vector<int> shadow_of_;
  std::vector<bool> input_set_;
  void* arena_ = nullptr;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  AttnRoute attention_ = AttnRoute::kDispatch;
  struct AttnCall {
    size_t launch;  // index into desc_
    loom::cuda::SdpaArgs args;
    bool backward;
  };
  std::vector<AttnCall> attn_calls_;  // dispatched attention launches, for Describe()
  std::vector<Call> calls_;
  std::vector<std::string> desc_;
  const bool profile_ = std::getenv("LOOM_CUDA_PROFILE") != nullptr;  // eager, timed launches
  std::vector<double> prof_ms_;  // per launch, summed over profiled steps
  int profiled_steps_ = 0;
  std::vector<std::unique_ptr<cg::PointwiseKernel>> kernels_;
  std::vector<std::unique_ptr<cg::RowwiseKernel>> row_kernels_;
  RowgenChoice rowgen_;
  std::vector<std::unique_ptr<Graph>> bodies_;
  std::vector<void*> owned_, pinned_;
  std::vector<cudaEvent_t> events_;
  std::map<int, Staging> staging_;
  int64_t slot_ = 0, steps_ = 0;
  int64_t device_bytes_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(const Graph& g, const CudaOptions& o) {
  // Plan first: an unsupported op is reported by name even without a device.
  LOOM_RETURN_IF_ERROR(PlanCuda(g, o.bf16, PlanOptionsFor(o)).status());
  auto e = std::make_unique<Impl>();
  LOOM_RETURN_IF_ERROR(e->Init(g, o));
  return std::unique_ptr<CudaExecutor>(std::move(e));
}

}  // namespace loom::compiler::cuda
