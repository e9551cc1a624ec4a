// CudaExecutor (cuda_executor_impl.h): device buffers (dry-run fake addresses
// without a device), input checks, the pinned staging of per-step inputs,
// device-to-host copies, the shared scratch size, and the small CUDA helpers.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/attention/sdpa_dispatch.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/reductions.h"
#include "kernels/cuda/rmsnorm.h"

namespace loom::compiler::cuda::cuda_executor_internal {

absl::Status Impl::CudaErr(int e, absl::string_view what) {
  if (e == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorString(static_cast<cudaError_t>(e))));
}

kern::Dt Impl::ToDt(DType d) {
  switch (d) {
    case DType::kBF16: return kern::kBF16;
    case DType::kI32: return kern::kI32;
    case DType::kI64: return kern::kI64;
    default: return kern::kF32;
  }
}

absl::StatusOr<void*> Impl::Alloc(int64_t bytes) {
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

absl::StatusOr<void*> Impl::AllocMappedHost(int64_t bytes, void** host) {
  if (bytes <= 0) bytes = 256;
  if (dry_) {
    host_bytes_ += (bytes + 4095) / 4096 * 4096;
    *host = reinterpret_cast<void*>(uintptr_t{3} << 40 | static_cast<uintptr_t>(host_bytes_));
    return *host;
  }
  void*& h = *host;
  LOOM_CU(cudaHostAlloc(&h, bytes, cudaHostAllocMapped), absl::StrCat("cudaHostAlloc ", bytes, " bytes"));
  pinned_.push_back(h);
  host_bytes_ += bytes;
  void* d = nullptr;
  LOOM_CU(cudaHostGetDevicePointer(&d, h, 0), "cudaHostGetDevicePointer");
  return d;
}

// Every device buffer of the plan: inputs (and their bf16 shadows), the
// arena, and the scratch shared by every launch (they run in stream order).
absl::Status Impl::AllocBuffers(CudaBuildStats* stats) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  const int ni = static_cast<int>(g_.inputs().size());
  input_buf_.assign(ni, nullptr);
  shadow_buf_.assign(ni, nullptr);
  input_set_.assign(ni, false);
  CudaBuildStats::Memory& mem = stats->memory;
  if (o_.arena_offset_bytes < 0 || o_.arena_offset_bytes % 256 != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("arena_offset_bytes: expected a multiple of 256 >= 0, got ", o_.arena_offset_bytes));
  if (!dry_) {  // a step that cannot fit fails here, saying why, not in a cudaMalloc halfway
    size_t free_bytes = 0, total_bytes = 0;
    LOOM_CU(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    DeviceMemory need = PlannedMemory(g_, plan_, o_.offload_optimizer_state);
    need.arena += o_.arena_offset_bytes;
    need.total += o_.arena_offset_bytes;
    LOOM_RETURN_IF_ERROR(CheckDeviceMemory(need, static_cast<int64_t>(free_bytes)));
  }
  host_view_.assign(ni, nullptr);
  for (int k = 0; k < ni; ++k) {
    const int v = g_.inputs()[k].value;
    const ir::InputKind kind = g_.inputs()[k].kind;
    if (kind == ir::InputKind::kState && o_.offload_optimizer_state) {
      LOOM_ASSIGN_OR_RETURN(input_buf_[k], AllocMappedHost(plan_.Bytes(v), &host_view_[k]));
      mem.host_states += plan_.Bytes(v);
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(input_buf_[k], Alloc(plan_.Bytes(v)));
    (kind == ir::InputKind::kParam ? mem.params : kind == ir::InputKind::kState ? mem.states : mem.other_inputs) +=
        plan_.Bytes(v);
    if (plan_.split[k]) {
      shadow_buf_[k] = input_buf_[k];  // the hi plane
    } else if (plan_.shadow[k] >= 0) {
      LOOM_ASSIGN_OR_RETURN(shadow_buf_[k], Alloc(plan_.Bytes(plan_.shadow[k])));
      mem.shadows += plan_.Bytes(plan_.shadow[k]);
    }
  }
  mem.arena = plan_.arena_bytes;
  shadow_of_.assign(plan_.metas.size(), -1);
  for (int k = 0; k < ni; ++k)
    if (plan_.shadow[k] >= 0) shadow_of_[plan_.shadow[k]] = k;
  LOOM_ASSIGN_OR_RETURN(void* arena, Alloc(plan_.arena_bytes + o_.arena_offset_bytes));
  arena_ = static_cast<char*>(arena) + o_.arena_offset_bytes;
  stats->buffers_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  int64_t scratch = 0;
  for (const Launch& l : plan_.launches) scratch = std::max(scratch, ScratchBytes(l));
  stats->scratch_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  LOOM_ASSIGN_OR_RETURN(scratch_, Alloc(scratch));
  scratch_bytes_ = scratch;
  mem.scratch = scratch;
  if (o_.poison_arena && !plan_.guards.empty() && !dry_) {  // WrapGuards' copies land here
    int64_t total = 0;
    for (const CudaPlan::Guard& gd : plan_.guards) total += gd.bytes;
    LOOM_CU(cudaMallocHost(&guard_host_, total), "cudaMallocHost (arena guards)");
    pinned_.push_back(guard_host_);
  }
  return absl::OkStatus();
}

void Impl::WrapGuards(int pos) {
  if (plan_.guards.empty()) return;
  const int npos = static_cast<int>(plan_.launches.size());
  std::vector<std::pair<void*, int64_t>> fill;            // guards born here
  std::vector<std::tuple<void*, const void*, int64_t>> back;  // guards dying here: host, device, bytes
  int64_t at = 0;
  for (const CudaPlan::Guard& gd : plan_.guards) {
    void* dev = static_cast<char*>(arena_) + gd.offset;
    if (gd.writer == pos) fill.push_back({dev, gd.bytes});
    if (gd.last == pos || (pos == npos - 1 && gd.last >= npos))
      back.push_back({guard_host_ ? static_cast<char*>(guard_host_) + at : nullptr, dev, gd.bytes});
    at += gd.bytes;
  }
  if (fill.empty() && back.empty()) return;
  cudaStream_t s = stream_;
  calls_.back() = [launch = calls_.back(), fill, back, s]() {
    for (const auto& [dev, bytes] : fill) LOOM_CU(cudaMemsetAsync(dev, 0xFF, bytes, s), "arena guard: fill");
    LOOM_RETURN_IF_ERROR(launch());
    for (const auto& [host, dev, bytes] : back)
      LOOM_CU(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s), "arena guard: copy");
    return absl::OkStatus();
  };
}

absl::Status Impl::CheckGuards() {
  if (plan_.guards.empty()) return absl::OkStatus();
  LOOM_CU(cudaStreamSynchronize(stream_), "arena guard: sync");
  const unsigned char* h = static_cast<const unsigned char*>(guard_host_);
  int64_t at = 0;
  for (const CudaPlan::Guard& gd : plan_.guards) {
    for (int64_t i = 0; i < gd.bytes; ++i)
      if (h[at + i] != 0xFF) {
        const int last = std::min<int>(gd.last, static_cast<int>(plan_.launches.size()) - 1);
        return absl::InternalError(absl::StrCat(
            "arena guard: byte ", i, " after %", gd.value, " (", plan_.metas[gd.value].ToString(), ", ",
            plan_.Bytes(gd.value), " bytes) was written in step ", steps_, " while it lived: by one of launches ",
            gd.writer, " (", plan_.launches[gd.writer].op, ", its first writer) to ", last, " (",
            plan_.launches[last].op, "), writing past an operand (--dump=cuda lists the launches)"));
      }
    at += gd.bytes;
  }
  return absl::OkStatus();
}

absl::Status Impl::CheckInput(int k, const Tensor& t) const {
  if (k < 0 || k >= static_cast<int>(g_.inputs().size()))
    return absl::InvalidArgumentError(absl::StrCat("input: index ", k, " out of range"));
  const ir::TensorMeta& m = g_.meta(g_.inputs()[k].value);
  if (!t.defined() || t.dtype() != m.dtype || t.shape() != m.shape || !t.device().is_cpu())
    return absl::InvalidArgumentError(absl::StrCat("input ", g_.inputs()[k].name, ": expected host ", m.ToString(),
                                                   ", got ",
                                                   t.defined() ? kernels::MetaOf(t).ToString() : "undefined"));
  return absl::OkStatus();
}

// Host -> pinned staging (two slots per input) -> device buffer, async.
absl::Status Impl::StageCopy(int k, const Tensor& t) {
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

absl::StatusOr<Tensor> Impl::ToHost(int v) {
  LOOM_CU(cudaStreamSynchronize(stream_), "sync");
  const int k = plan_.root[v] >= 0 ? plan_.input_of[plan_.root[v]] : -1;
  if (k >= 0 && plan_.split[k]) {  // the two planes, joined
    const int64_t n = Numel(v);
    std::vector<uint16_t> planes(2 * n);
    LOOM_CU(cudaMemcpyAsync(planes.data(), Ptr(v), 4 * n, cudaMemcpyDeviceToHost, stream_), "copy to host");
    LOOM_CU(cudaStreamSynchronize(stream_), "sync");
    Tensor h = Tensor::MustEmpty(Sh(v), DType::kF32);
    cg::JoinF32(planes.data(), n, h.data<float>());
    return h;
  }
  Tensor h = Tensor::MustEmpty(Sh(v), Dt(v));
  // An offloaded input is host memory already (the stream is synchronised).
  if (k >= 0 && OnHost(k)) {
    std::memcpy(h.raw_data(), OnHost(k), plan_.Bytes(v));
  } else {
    LOOM_CU(cudaMemcpyAsync(h.raw_data(), Ptr(v), plan_.Bytes(v), cudaMemcpyDeviceToHost, stream_), "copy to host");
  }
  LOOM_CU(cudaStreamSynchronize(stream_), "sync");
  const DType want = g_.meta(v).dtype;
  return want == h.dtype() ? h : h.To(want);
}

int64_t Impl::ScratchBytes(const Launch& l) const {
  switch (l.kind) {
    case LaunchKind::kLayerNormBackward: {
      const int64_t cols = Sh(l.inputs[1]).back(), rows = Numel(l.inputs[1]) / std::max<int64_t>(cols, 1);
      return 4 * loom::kernels::cuda::LayerNormBwdWorkspaceFloats(rows, cols);
    }
    case LaunchKind::kSumTo: {
      const int64_t cols = Numel(l.outputs[0]), rows = Numel(l.inputs[0]) / std::max<int64_t>(cols, 1);
      return 4 * kern::SumRowsWorkspaceFloats(rows, cols);
    }
    case LaunchKind::kRmsNormBackward: {
      const int64_t cols = Sh(l.inputs[1]).back(), rows = Numel(l.inputs[1]) / std::max<int64_t>(cols, 1);
      return 4 * kern::RmsNormBwdWorkspaceFloats(rows, cols);
    }
    case LaunchKind::kGradNorm: {
      int64_t t = 0;
      for (int v : l.inputs) t += kern::GradNormChunks(Numel(v));
      return 4 * std::max<int64_t>(t, 1);
    }
    case LaunchKind::kEmbeddingBackwardSorted: {
      // CUB's size query needs a device; dry (none): the four pair arrays,
      // 256-byte aligned, without CUB's part.
      const int64_t rows = Numel(l.inputs[1]), vocab = Sh(l.outputs[0])[0];
      if (dry_) return 4 * ((4 * rows + 255) / 256 * 256);
      size_t bytes = 0;
      const int e = kern::EmbeddingBackwardWorkspaceBytes(kern::kEmbBwdSorted, rows, vocab, &bytes);
      // An error here surfaces at the launch, which checks its workspace.
      return e == 0 ? static_cast<int64_t>(bytes) : 0;
    }
    case LaunchKind::kCrossEntropy: return 4 * Sh(l.inputs[0])[0];
    case LaunchKind::kCrossEntropyBackward: return 256;
    case LaunchKind::kCrossEntropyFused: return 4 * (Sh(l.inputs[1])[0] + 1);
    case LaunchKind::kSdpa:
    case LaunchKind::kSdpaBackward: {
      const bool bwd = l.kind == LaunchKind::kSdpaBackward;
      if (!UseFlash(l)) return bwd ? loom::kernels::cuda::attention::SdpaBackwardWorkspaceBytes(MathCallArgs(l)) : 0;
      const loom::kernels::cuda::attention::SdpaArgs a = AttnCallArgs(l);
      if (attention_ == AttnRoute::kFlash || dry_)  // dry: no device to build cuDNN plans on
        return bwd ? loom::kernels::cuda::attention::SdpaBackwardWorkspaceBytes(a) : 0;
      return loom::kernels::cuda::attention::SdpaWorkspaceBytes(a, bwd);  // builds cuDNN's plan now, outside capture
    }
    default: return 0;
  }
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
