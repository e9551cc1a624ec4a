// CudaExecutor over the CUDA runtime: turns each planned Launch (plan.h) into a
// closure over fixed device pointers, runs them eagerly once, then captures
// them as one CUDA graph and replays it. See cuda_executor.h. This file: Create,
// Init, the steps (eager, captured, replayed), outputs and Describe; the other
// cuda_executor_*.cc files are listed in cuda_executor_impl.h.
#include "compiler/cuda/cuda_executor.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/tuning_cache.h"

namespace loom::compiler::cuda::cuda_executor_internal {

Impl::~Impl() {
  if (profiled_steps_ > 0) PrintProfile();
  for (cudaGraphExec_t e : execs_)
    if (e) cudaGraphExecDestroy(e);
  for (cudaGraph_t g : graphs_) cudaGraphDestroy(g);
  for (void* p : owned_) cudaFree(p);
  for (void* p : pinned_) cudaFreeHost(p);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

absl::Status Impl::Init(const ir::Graph& g, const CudaOptions& o) {
  g_ = g;
  o_ = o;
  CudaBuildStats stats;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  // deterministic: no choice made by timing either, so another process (a
  // resumed run) picks the same kernels: attention on the flash kernels'
  // default variants, GEMMs on cuBLASLt's first heuristic choice.
  attention_ = o.deterministic ? AttnRoute::kFlash : o.attention;
  auto t0 = Clock::now();
  LOOM_ASSIGN_OR_RETURN(plan_, PlanCuda(g, o.bf16, PlanOptionsFor(o)));
  MarkReadRoots();
  stats.plan_seconds = since(t0);
  // Without a device the whole build still runs ("dry": fake addresses, no
  // uploads), so codegen problems surface on machines without a GPU; Init
  // then returns the device error.
  t0 = Clock::now();
  absl::StatusOr<loom::kernels::cuda::DeviceRuntime*> rt =
      force_dry_ ? absl::StatusOr<loom::kernels::cuda::DeviceRuntime*>(absl::UnavailableError("a dry build (DryBuild)"))
                 : loom::kernels::cuda::DeviceRuntime::Get(o.device);
  dry_ = stats.dry = !rt.ok();
  if (!dry_) {
    LOOM_RETURN_IF_ERROR((*rt)->MakeCurrent());
    stream_ = static_cast<cudaStream_t>((*rt)->compute_stream());
  }
  stats.device_seconds = since(t0);
  // Choices made by timing (GEMM algorithms, SDPA kernels, cuDNN engine
  // configs) are kept beside the kernels: <kernel cache>/choices.tsv.
  if (!dry_) {
    const std::string choices = cg::KernelCacheDir(o.kernel_cache) + "/choices.tsv";
    loom::kernels::cuda::TuningCache& tc = loom::kernels::cuda::TuningCache::Global();
    if (tc.path() != choices && cg::MakeCacheDir(cg::KernelCacheDir(o.kernel_cache))) tc.Open(choices).IgnoreError();
  }
  loom::kernels::cuda::SetGemmAutotune(o.autotune_gemm && !o.deterministic);
  LOOM_RETURN_IF_ERROR(AllocBuffers(&stats));
  t0 = Clock::now();
  for (size_t pos = 0; pos < plan_.launches.size(); ++pos) {
    LOOM_RETURN_IF_ERROR(Build(plan_.launches[pos]));
    if (o.poison_arena) WrapGuards(static_cast<int>(pos));
  }
  stats.build_seconds = since(t0);
  stats.launches = static_cast<int>(plan_.launches.size());
  stats.inference_attention = inference_attention_;
  t0 = Clock::now();
  absl::Status compiled = CompileKernels(&stats);
  stats.kernels_seconds = since(t0);
  LOOM_RETURN_IF_ERROR(compiled);
  segments_ = Segments();
  stats.memory.total = device_bytes_;
  if (o.stats != nullptr) *o.stats = stats;
  return dry_ ? rt.status() : absl::OkStatus();
}

absl::Status Impl::SetInput(int k, const Tensor& host) {
  LOOM_RETURN_IF_ERROR(CheckInput(k, host));
  // Copies on the compute stream (non-blocking: the legacy stream would not
  // order against it), then wait so the host tensors may go away.
  const int v = g_.inputs()[k].value;
  // In the storage layout: converted (bf16 states), or the split planes.
  Tensor c = Dt(v) == host.dtype() ? host.Contiguous() : host.To(Dt(v)).Contiguous();
  std::vector<uint16_t> planes;
  const void* src = c.raw_data();
  if (plan_.split[k]) {
    planes.resize(2 * c.numel());
    cg::SplitF32(c.data<float>(), c.numel(), planes.data());
    src = planes.data();
  }
  if (OnHost(k)) {  // mapped host memory: no kernel may be using it while it is written
    LOOM_CU(cudaStreamSynchronize(stream_), "SetInput: sync");
    std::memcpy(OnHost(k), src, plan_.Bytes(v));
  } else {
    LOOM_CU(cudaMemcpyAsync(input_buf_[k], src, plan_.Bytes(v), cudaMemcpyHostToDevice, stream_), "SetInput: copy");
  }
  Tensor b;
  if (shadow_buf_[k] && !plan_.split[k]) {
    b = host.To(DType::kBF16);
    LOOM_CU(cudaMemcpyAsync(shadow_buf_[k], b.raw_data(), b.numel() * 2, cudaMemcpyHostToDevice, stream_),
            "SetInput: shadow");
  }
  LOOM_CU(cudaStreamSynchronize(stream_), "SetInput: sync");
  input_set_[k] = true;
  return absl::OkStatus();
}

absl::Status Impl::ZeroInput(int k) {
  if (k < 0 || k >= static_cast<int>(g_.inputs().size()))
    return absl::InvalidArgumentError(absl::StrCat("ZeroInput: index ", k, " out of range"));
  const int v = g_.inputs()[k].value;
  if (OnHost(k)) {  // mapped host memory: no kernel may be using it while it is written
    LOOM_CU(cudaStreamSynchronize(stream_), "ZeroInput: sync");
    std::memset(OnHost(k), 0, plan_.Bytes(v));
  } else {
    LOOM_CU(cudaMemsetAsync(input_buf_[k], 0, plan_.Bytes(v), stream_), "ZeroInput: fill");
  }
  if (shadow_buf_[k] && !plan_.split[k])
    LOOM_CU(cudaMemsetAsync(shadow_buf_[k], 0, plan_.Bytes(plan_.shadow[k]), stream_), "ZeroInput: shadow");
  LOOM_CU(cudaStreamSynchronize(stream_), "ZeroInput: sync");
  input_set_[k] = true;
  return absl::OkStatus();
}

absl::Status Impl::Step(absl::Span<const std::pair<int, Tensor>> step_inputs) {
  for (const auto& [k, t] : step_inputs) {
    LOOM_RETURN_IF_ERROR(CheckInput(k, t));
    // A parameter, converted, or in host memory: synchronously.
    if (shadow_buf_[k] || OnHost(k) || Dt(g_.inputs()[k].value) != t.dtype()) {
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
  if (o_.poison_arena && !dry_) {
    LOOM_CU(cudaMemsetAsync(arena_, 0xFF, plan_.arena_bytes, stream_), "poison_arena: arena");
    LOOM_CU(cudaMemsetAsync(scratch_, 0xFF, scratch_bytes_, stream_), "poison_arena: scratch");
  }
  if (!o_.cuda_graph || steps_ == 0 || o_.profile) {
    LOOM_RETURN_IF_ERROR(RunCalls(o_.profile && steps_ > 0));  // step 1 warms up (autotuning)
  } else {
    if (execs_.empty()) {
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
    LOOM_RETURN_IF_ERROR(Replay());
  }
  ++steps_;
  if (o_.poison_arena && !dry_) LOOM_RETURN_IF_ERROR(CheckGuards());
  return absl::OkStatus();
}

std::vector<std::pair<size_t, size_t>> Impl::Segments() const {
  std::vector<std::pair<size_t, size_t>> seg;
  size_t begin = 0;
  for (size_t h : host_calls_) {
    seg.push_back({begin, h});
    begin = h + 1;
  }
  seg.push_back({begin, calls_.size()});
  return seg;
}

// Records every segment's launches as a CUDA graph (nothing runs); on failure
// none is kept.
absl::Status Impl::Capture() {
  std::vector<cudaGraph_t> graphs;
  std::vector<cudaGraphExec_t> execs;
  auto drop = [&]() {
    for (cudaGraphExec_t e : execs)
      if (e) cudaGraphExecDestroy(e);
    for (cudaGraph_t g : graphs) cudaGraphDestroy(g);
  };
  for (const auto& [begin, end] : segments_) {
    if (begin == end) {  // two host calls in a row: nothing to replay between them
      execs.push_back(nullptr);
      continue;
    }
    LOOM_CU(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), "begin capture");
    absl::Status s;
    for (size_t i = begin; i < end && s.ok(); ++i) {
      s = calls_[i]();
      if (!s.ok()) s = absl::Status(s.code(), absl::StrCat("launch ", i, " (", desc_[i], "): ", s.message()));
    }
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (graph) graphs.push_back(graph);
    if (!s.ok() || e != cudaSuccess) {
      drop();
      return s.ok() ? CudaErr(e, "end capture") : s;
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
      drop();
      return CudaErr(e, "graph instantiate");
    }
    execs.push_back(exec);
  }
  graphs_ = std::move(graphs);
  execs_ = std::move(execs);
  return absl::OkStatus();
}

// One step from the captured graphs: each segment's graph, then the host
// call that ends it.
absl::Status Impl::Replay() {
  for (size_t k = 0; k < segments_.size(); ++k) {
    if (execs_[k]) LOOM_CU(cudaGraphLaunch(execs_[k], stream_), "graph launch");
    if (k < host_calls_.size()) {
      const size_t h = host_calls_[k];
      absl::Status s = calls_[h]();
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("launch ", h, " (", desc_[h], "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Impl::RunCalls(bool profile) {
  // Profiling (CudaOptions::profile, eager steps only): an event between
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

absl::StatusOr<Tensor> Impl::Output(int i) {
  if (i < 0 || i >= static_cast<int>(g_.outputs().size()))
    return absl::InvalidArgumentError(absl::StrCat("Output: i: ", i, " out of range"));
  return ToHost(g_.outputs()[i].value);
}

absl::StatusOr<Tensor> Impl::OutputDevice(int i) {
  if (i < 0 || i >= static_cast<int>(g_.outputs().size()))
    return absl::InvalidArgumentError(absl::StrCat("OutputDevice: i: ", i, " out of range"));
  LOOM_CU(cudaStreamSynchronize(stream_), "sync");
  const int v = g_.outputs()[i].value;
  const int k = plan_.root[v] >= 0 ? plan_.input_of[plan_.root[v]] : -1;
  if (k >= 0 && plan_.split[k])
    return absl::FailedPreconditionError(absl::StrCat("OutputDevice: output ", i, " is the parameter ",
                                                      g_.inputs()[k].name, ", stored split (no f32 view)"));
  return Tensor::Wrap(Ptr(v), Sh(v), Dt(v), loom::Device::CUDA(o_.device));
}

absl::StatusOr<Tensor> Impl::Input(int k) {
  if (k < 0 || k >= static_cast<int>(g_.inputs().size()))
    return absl::InvalidArgumentError(absl::StrCat("Input: k: ", k, " out of range"));
  return ToHost(g_.inputs()[k].value);
}

absl::Status Impl::Synchronize() {
  LOOM_CU(cudaStreamSynchronize(stream_), "synchronize");
  return absl::OkStatus();
}

std::string Impl::Describe() const {
  std::string s;
  for (size_t i = 0; i < desc_.size(); ++i) absl::StrAppend(&s, i, ": ", desc_[i], "\n");
  // What the SDPA dispatcher picked for each distinct attention shape.
  std::set<std::string> keys;
  for (const AttnCall& c : attn_calls_) {
    const std::string key = loom::kernels::cuda::attention::SdpaDispatcher::Key(c.args, c.backward);
    if (keys.insert(key).second)
      absl::StrAppend(&s, "sdpa ", key, " -> ",
                      loom::kernels::cuda::attention::SdpaDispatcher::Global().Choice(c.args, c.backward), "\n");
  }
  const std::string mode = !execs_.empty() ? absl::StrCat(execs_.size(), " cuda graph(s) (replaying)")
                           : o_.cuda_graph  ? "cuda graph (after the first step)"
                                            : "eager";
  absl::StrAppend(&s, "arena ", plan_.arena_bytes, " B, device total ", device_bytes_, " B, ",
                  host_bytes_ > 0 ? absl::StrCat("optimizer state on the host ", host_bytes_, " B, ") : "",
                  o_.bf16 ? "bf16" : "f32", ", ", mode, "\n");
  if (!host_calls_.empty()) absl::StrAppend(&s, host_calls_.size(), " collective host call(s) between them\n");
  return s;
}

}  // namespace loom::compiler::cuda::cuda_executor_internal

namespace loom::compiler::cuda {

absl::StatusOr<CudaBuildStats> DryBuild(const ir::Graph& g, const CudaOptions& o) {
  cuda_executor_internal::Impl e;
  e.ForceDry();
  CudaBuildStats stats;
  CudaOptions dry = o;
  dry.stats = &stats;
  absl::Status s = e.Init(g, dry);
  // Init ends with the (forced) device error once everything is built.
  if (!(stats.dry && stats.launches > 0 && s.code() == absl::StatusCode::kUnavailable))
    return s.ok() ? absl::InternalError("DryBuild: built with a device") : s;
  if (o.stats != nullptr) *o.stats = stats;
  return stats;
}

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(const ir::Graph& g, const CudaOptions& o) {
  // Init plans first: an unsupported op is reported by name even without a device.
  auto e = std::make_unique<cuda_executor_internal::Impl>();
  LOOM_RETURN_IF_ERROR(e->Init(g, o));
  return std::unique_ptr<CudaExecutor>(std::move(e));
}

}  // namespace loom::compiler::cuda
