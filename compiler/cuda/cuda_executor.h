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
// device arena), compiles the pointwise kernels (codegen/pointwise.h) and
// uploads the multi-tensor AdamW table; an op without a CUDA launch is
// Unimplemented naming it (also in builds without CUDA, where a plannable graph
// then gets Unavailable). Parameters and optimizer state stay on the device;
// outputs that update an input (params, m, v) are written in place. Step copies
// the per-step inputs into fixed device buffers and enqueues the step without
// any host synchronisation: eagerly on the first call, then (cuda_graph) as one
// captured CUDA graph replayed every step. Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/tensor.h"
#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::cuda {

struct CudaOptions {
  int device = 0;
  bool bf16 = false;        // mixed precision: fp32 master weights + AdamW state, bf16
                            // matmul/attention/activations, f32 norm stats/softmax/loss
  bool cuda_graph = true;   // capture the step once (after one eager warm-up), replay
  bool autotune_gemm = true;
  // The newer pattern fusions (plan.h PlanOptions); env LOOM_CUDA_BASIC_FUSIONS=1
  // also turns them off, to bisect a problem on the GPU.
  bool extra_fusions = true;
  // Generated row-wise kernels (codegen/rowwise.h, NVRTC) instead of the
  // hand-written ones, which stay the reference and the fallback. The
  // generated layernorm also takes the add before it (PlanOptions::add_layernorm).
  // Env LOOM_CUDA_ROWGEN overrides all three: "0"/"none", "1"/"all", or a comma
  // list of ln, ce, adamw. Defaults from the H200 at GPT-2 124M shapes (bf16,
  // rowwise_gpu_check): layernorm 24.8 vs 29.2 us, add+layernorm 32.0 us vs
  // 72.2 us, AdamW over 124M params 977 vs 1361 us; cross-entropy forward
  // 570 vs 486 us (bwd 815 vs 819 us): the hand-written one stays the default.
  bool rowgen_layernorm = true;
  bool rowgen_cross_entropy = false;
  bool rowgen_adamw = true;
  // Attention (bf16/f16, head_dim 64 or 128): kDispatch runs the SDPA
  // dispatcher (kernels/cuda/attention/sdpa_dispatch.h), which times its
  // candidates (Loom's flash variants, cuDNN's fused attention) in the first,
  // eager step and keeps the fastest per shape; kFlash runs Loom's flash
  // kernels with their default variants. Env LOOM_CUDA_ATTN=flash|dispatch
  // overrides.
  enum class Attention { kDispatch, kFlash } attention = Attention::kDispatch;
  // Only kernels whose results are bit-identical run to run: the attention
  // backward then never sums dQ with atomics (no cuDNN backward, no atomic
  // flash variant).
  bool deterministic = false;
};

using AttnRoute = CudaOptions::Attention;
// The attention route after the LOOM_CUDA_ATTN override.
inline AttnRoute AttnRouteFor(const CudaOptions& o) {
  const char* e = std::getenv("LOOM_CUDA_ATTN");
  if (e == nullptr || *e == '\0') return o.attention;
  return std::string(e) == "flash" ? AttnRoute::kFlash : AttnRoute::kDispatch;
}

// The row-wise kernel choice after the LOOM_CUDA_ROWGEN override.
struct RowgenChoice {
  bool layernorm = false, cross_entropy = false, adamw = false;
};
inline RowgenChoice RowgenFor(const CudaOptions& o) {
  RowgenChoice c{o.rowgen_layernorm, o.rowgen_cross_entropy, o.rowgen_adamw};
  const char* e = std::getenv("LOOM_CUDA_ROWGEN");
  if (e == nullptr || *e == '\0') return c;
  const std::string v = std::string(",") + e + ",";
  const bool all = v == ",1," || v == ",all,";
  c.layernorm = all || v.find(",ln,") != std::string::npos;
  c.cross_entropy = all || v.find(",ce,") != std::string::npos;
  c.adamw = all || v.find(",adamw,") != std::string::npos;
  return c;
}

// The plan options a CudaOptions stands for (extra_fusions and the
// LOOM_CUDA_BASIC_FUSIONS environment switch).
inline PlanOptions PlanOptionsFor(const CudaOptions& o) {
  const char* e = std::getenv("LOOM_CUDA_BASIC_FUSIONS");
  const bool on = o.extra_fusions && !(e != nullptr && *e != '\0' && std::string(e) != "0");
  PlanOptions p;
  p.compose_copies = p.fold_residual_grad = on;
  const char* ac = std::getenv("LOOM_CUDA_ATTN_COPIES");  // the copy launches around attention, for bisecting
  p.attn_views = on && !(ac != nullptr && *ac != '\0' && std::string(ac) != "0");
  const char* bg = std::getenv("LOOM_CUDA_BIAS_GRAD_IN_GEMM");  // measured slower: see plan.h
  p.bias_grad_in_gemm = on && bg != nullptr && std::string(bg) == "1";
  const char* lb = std::getenv("LOOM_CUDA_LN_BIAS_GRAD");  // "1": column sums in the norm kernel (see plan.h)
  p.bias_grad_in_layernorm = on && lb != nullptr && std::string(lb) == "1";
  p.add_layernorm = on && RowgenFor(o).layernorm;
  const char* ce = std::getenv("LOOM_CUDA_CE_FUSED");  // "0": cross-entropy forward and backward apart
  p.fuse_cross_entropy = on && !RowgenFor(o).cross_entropy && !(ce != nullptr && std::string(ce) == "0");
  return p;
}

class CudaExecutor {
 public:
  // g: the optimized (or fused) joint graph, as the CPU lowering gets it.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(const Graph& g, const CudaOptions& o);
  virtual ~CudaExecutor() = default;
  // Uploads graph input k (parameters, optimizer state: device-resident from then on).
  virtual absl::Status SetInput(int k, const Tensor& host) = 0;
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
