// CudaExecutor: runs the compiler's joint training graph (forward + backward +
// AdamW, compiler/compile.h) on one GPU.
//
//   CudaOptions o;  o.bf16 = true;
//   LOOM_ASSIGN_OR_RETURN(auto exec, CudaExecutor::Create(c.stages.at("fused"), o));
//   for (int k : param_and_state_inputs) LOOM_RETURN_IF_ERROR(exec->SetInput(k, host[k]));
//   for each step:
//     LOOM_RETURN_IF_ERROR(exec->Step({{x_k, x}, {y_k, y}, {lr_k, lr}, {step_k, step}}));
//   LOOM_ASSIGN_OR_RETURN(Tensor loss, exec->Output(0));   // synchronises
//
// Create plans everything once (plan.h: storage dtypes, pattern fusions, one
// device arena), generates the pointwise and row-wise kernels
// (codegen/pointwise.h, rowwise.h), compiles their distinct sources in
// parallel (CudaOptions::compile_threads; on-disk cache:
// CudaOptions::kernel_cache) and
// uploads the multi-tensor AdamW table; an op without a CUDA launch is
// Unimplemented naming it (also in builds without CUDA, where a plannable graph
// then gets Unavailable). Parameters and optimizer state stay on the device;
// outputs that update an input (params, m, v) are written in place. Step copies
// the per-step inputs into fixed device buffers and enqueues the step without
// any host synchronisation: eagerly on the first call, then (cuda_graph) as one
// captured CUDA graph replayed every step. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/tensor.h"
#include "compiler/comm/communicator.h"
#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::cuda {

// Where CudaExecutor::Create spent its time (CudaOptions::stats). Filled in
// also when Create then fails for want of a device (a "dry" build: fake
// addresses, no uploads), so the host side is measurable without a GPU.
struct CudaBuildStats {
  bool dry = false;
  double plan_seconds = 0;     // PlanCuda
  double device_seconds = 0;   // the device runtime (context) of CudaOptions::device
  double scratch_seconds = 0;  // every launch's workspace size (on a GPU this
                               // builds cuDNN's SDPA plans, when cuDNN is a candidate)
  double buffers_seconds = 0;  // device buffers (inputs, shadows, arena, scratch)
  double build_seconds = 0;    // a closure per launch, with the kernel sources generated
  double kernels_seconds = 0;  // the generated kernels' CUBINs (disk cache or NVRTC)
  int launches = 0;
  int inference_attention = 0;  // attention forwards whose lse nothing reads: run without it
  int kernels = 0;             // generated kernels (pointwise and row-wise)
  int distinct_sources = 0;    // distinct sources among them
  int cache_hits = 0;          // distinct sources whose CUBIN came from the disk cache
  int nvrtc_compiles = 0;      // distinct sources NVRTC compiled
  int compile_threads = 0;     // threads that compiled them
  double nvrtc_seconds = 0;    // NVRTC alone, summed over those threads
  // Device memory by what it holds (plan.h DeviceMemory; a dry build counts
  // the same buffers; the CUDA context and cuBLASLt's and cuDNN's own
  // workspaces are not the executor's and not counted).
  using Memory = DeviceMemory;
  Memory memory;
};

struct CudaOptions {
  int device = 0;
  bool bf16 = false;        // mixed precision: fp32 master weights + AdamW state, bf16
                            // matmul/attention/activations, f32 norm stats/softmax/loss
  bool cuda_graph = true;   // capture the step once (after one eager warm-up), replay
  bool autotune_gemm = true;
  // The pattern fusions of the plan (plan.h PlanOptions: composed copies,
  // residual-gradient folding, add -> layernorm, strided attention operands,
  // fused cross-entropy). false: one launch per node for those patterns, a
  // debug aid to bisect a problem on the GPU.
  bool extra_fusions = true;
  // The GEMM epilogues of bf16 plans (bias, bias + tanh GELU, dgelu). false:
  // every GEMM plain, the bias add and GELU (backward) launches of their own;
  // the same kind of debug aid, apart from extra_fusions.
  bool gemm_epilogues = true;
  // Attention (bf16, head_dim 64 or 128): kDispatch runs the SDPA dispatcher
  // (kernels/cuda/attention/sdpa_dispatch.h), which times its candidates
  // (Loom's flash variants, cuDNN's fused attention) in the first, eager step
  // and keeps the fastest per shape; kFlash runs Loom's flash kernels with
  // their default variants (no cuDNN, no timing).
  enum class Attention { kDispatch, kFlash } attention = Attention::kDispatch;
  // Only kernels whose results are bit-identical run to run, and no kernel
  // choice made by timing, so a step repeats bitwise in another process too
  // (same GPU model, toolkit and plan): embedding_backward is the sorted
  // kernel (PlanOptions::deterministic, kernels/cuda/embedding.h
  // kEmbBwdSorted) instead of f32 atomics; attention runs Loom's flash
  // kernels with their default variants (as kFlash: no cuDNN, no atomic-dQ
  // backward, no timed pick), whatever `attention` says; GEMMs take
  // cuBLASLt's first heuristic algorithm (autotune_gemm is ignored).
  bool deterministic = false;
  // Only the embedding gradient without atomics (the sorted kernel, as under
  // `deterministic`), attention and GEMMs as chosen otherwise: PyTorch's
  // CUDA embedding backward sorts its ids too. Costs the sort of a step's
  // ids; removes one of the step's two sources of run-to-run variation
  // (the other: cuDNN's attention backward, whose dQ sums in f32 atomics).
  bool sorted_embedding_backward = false;
  // bf16 plans: the residual stream and its gradient stored f32, as PyTorch's
  // autocast keeps them (PlanOptions::f32_residual; train.residual_precision: f32).
  bool f32_residual = false;
  // Debug aid: every step runs eagerly with an event between launches, and
  // the per-kind and costliest-launch tables are printed to stderr when the
  // executor is destroyed (steps are then much slower than graph replay).
  bool profile = false;
  // One communicator per process group that the graph's collective ops name
  // (compiler/comm/communicator.h: "dp", "tp", ...), for a rank of a parallel
  // program; a group of world 1 needs none. The executor calls them between
  // its launches, after synchronising its stream, on this device's buffers
  // (Device::CUDA tensors, contiguous, the collective axis leading):
  // AllReduce(t, t, kind) in place, AllGather(in, out, 0) and
  // ReduceScatter(in, out, 0, kind). Their ranks also place shard_slice and
  // vocab_onehot (PlanOptions::group_rank). Not owned; they outlive the
  // executor.
  comm::CommunicatorMap communicators;
  // The on-disk CUBIN cache of the generated kernels
  // (kernels/cuda/codegen/nvrtc_cache.h CodegenOptions::cache_dir): "" is
  // its default, $LOOM_KERNEL_CACHE or ~/.cache/loom/kernels.
  std::string kernel_cache;
  // Threads that compile the generated kernels' distinct sources with NVRTC
  // (codegen's CompileAll): 0 is the hardware concurrency, 1 compiles them in
  // the calling thread. The kernels are the same whatever the count.
  int compile_threads = 0;
  // When set, Create fills it in (CudaBuildStats). Not owned.
  CudaBuildStats* stats = nullptr;
  // The training state's device memory under bf16 (plan.h MemoryPolicy).
  // kStandard: f32 parameters with a bf16 shadow per GEMM weight, f32 AdamW
  // states and f32 parameter gradients (18 bytes a GEMM weight). kLean: the
  // parameter gradients and AdamW's m and v stored bf16 (m and v rounded
  // stochastically), the GEMM-only weights split (exact f32 updates, the
  // shadow is half of the parameter's own bytes): 10 bytes a GEMM weight.
  // Input(k) and SetInput convert, so the host sees f32 either way.
  enum class Memory { kStandard, kLean } memory = Memory::kStandard;
  // kStandard with the parameter gradients of the GEMM weights stored bf16:
  // each weight-gradient GEMM accumulates in f32 and rounds once to bf16, as
  // the bf16 GEMM under PyTorch's autocast does before its f32 .grad copy,
  // so the values AdamW reads are the same and 2 bytes a GEMM weight fewer
  // move through the backward, the gradient norm and the update. The norms'
  // and the embedding's gradients, and sums with them (a tied weight's), stay
  // f32 (MemoryPolicy::bf16_param_grads; train.grad_precision: bf16). kLean
  // stores them bf16 either way.
  bool bf16_grads = false;
  // The optimizer state (AdamW's m and v: the graph's state inputs) in
  // pinned, mapped host memory instead of on the device: the AdamW kernel
  // reads and writes it over the bus (zero-copy) as it updates each chunk,
  // the transfers overlapped with its arithmetic. Frees the states' device
  // bytes (8 a parameter, 4 under kLean) for a slower update.
  bool offload_optimizer_state = false;
  // Bytes left unused before the arena in its allocation, so that the plan's
  // activations and gradients sit that far into device memory. For checks
  // that no kernel's addressing depends on where its buffers sit (a step
  // must give the same results at any offset); 0 in training.
  int64_t arena_offset_bytes = 0;
  // Before every step, the arena and the shared scratch are filled with 0xFF
  // bytes (NaN in f32 and bf16): a launch that reads what no launch of the
  // step wrote then turns the loss into NaN instead of reading the previous
  // step's leftovers. For checks; off in training.
  bool poison_arena = false;
  // Bytes kept free after every arena buffer while it lives
  // (PlanOptions::guard_bytes). With poison_arena they are filled with 0xFF
  // (NaN) before the buffer's first writer runs, so a launch reading past an
  // operand reads NaN, and read back after its last reader: a guard no
  // longer all 0xFF fails the step naming the buffer it follows and the
  // launches that ran while it lived. For checks; 0 in training.
  int64_t arena_guard_bytes = 0;
};

using AttnRoute = CudaOptions::Attention;

// The plan options a CudaOptions stands for (extra_fusions, deterministic).
inline PlanOptions PlanOptionsFor(const CudaOptions& o) {
  PlanOptions p;
  p.compose_copies = p.fold_residual_grad = p.add_layernorm = p.attn_views = p.fuse_cross_entropy =
      p.accumulate_gemms = o.extra_fusions;
  p.gemm_epilogues = o.gemm_epilogues;
  p.deterministic = o.deterministic;
  p.sorted_embedding_backward = o.sorted_embedding_backward;
  p.f32_residual = o.f32_residual;
  p.guard_bytes = o.arena_guard_bytes;
  if (o.memory == CudaOptions::Memory::kLean) p.memory = MemoryPolicy{true, true, true};
  if (o.bf16_grads) p.memory.bf16_param_grads = true;
  for (const auto& [group, c] : o.communicators)
    if (c != nullptr) p.group_rank[group] = c->rank();
  return p;
}

// Everything CudaExecutor::Create does without touching a device, even on a
// machine that has one: the plan, every launch built over fake addresses, the
// generated kernels compiled (or read from the cache). Returns where the time
// went and the device memory by kind (CudaBuildStats::memory): whether a job
// fits before it runs. Errors as Create's (an op without a launch:
// Unimplemented naming it); Unavailable in a build without the toolkit.
absl::StatusOr<CudaBuildStats> DryBuild(const ir::Graph& g, const CudaOptions& o);

class CudaExecutor {
 public:
  // g: the optimized (or fused) joint graph, as the CPU lowering gets it.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(const ir::Graph& g, const CudaOptions& o);
  virtual ~CudaExecutor() = default;
  // Uploads graph input k (parameters, optimizer state: device-resident from then on).
  virtual absl::Status SetInput(int k, const Tensor& host) = 0;
  // Input k set to zeros on the device, without a host tensor or a copy:
  // what SetInput of host zeros stores, in every storage layout (fresh
  // optimizer state; zero bits are zero in f32, bf16 and the split planes).
  virtual absl::Status ZeroInput(int k) = 0;
  // One step; per-step inputs are copied into fixed device buffers. Asynchronous.
  virtual absl::Status Step(absl::Span<const std::pair<int, Tensor>> step_inputs) = 0;
  virtual absl::StatusOr<Tensor> Output(int i) = 0;  // device -> host (synchronises)
  virtual absl::StatusOr<Tensor> Input(int k) = 0;   // current device value of input k
  // Output i in place on the device (Device::CUDA, the stored dtype: bf16
  // under the bf16 policy where the graph says f32), after synchronising the
  // step; valid until the next Step. For collectives on the step's results.
  virtual absl::StatusOr<Tensor> OutputDevice(int i) = 0;
  virtual absl::Status Synchronize() = 0;
  virtual std::string Describe() const = 0;          // one line per launch
  virtual int64_t device_bytes() const = 0;
  virtual const CudaPlan& plan() const = 0;
  // True once steps replay the captured CUDA graph (false: eager, by option or
  // because capture failed; the failure is printed to stderr).
  virtual bool graph_replay() const = 0;
};

}  // namespace loom::compiler::cuda
