// Row-wise CUDA code generation: NVRTC-compiled kernels specialised per region
// for the row reductions of a training step, sharing pointwise's NVRTC loader
// and on-disk cache (nvrtc_cache.h).
//
//   LnSpec s;  s.cols = 768;  s.dtype = DType::kBF16;
//   s.addends = {{DType::kBF16}, {DType::kF32, 1}, {DType::kBF16}};  // mm + bias + residual
//   LOOM_ASSIGN_OR_RETURN(auto k, RowwiseKernel::LayerNorm(s));
//   LnParams p{{mm, bias, res}, gamma, beta, h, y, mean, rstd, rows};
//   LOOM_RETURN_IF_ERROR(k->Launch(p, stream));
//
// Kernels (f32 statistics; storage dtypes f32 or bf16, rounded once, RN):
//  - LayerNorm (and RMSNorm, LnSpec::rms): one block of `threads` per row (grid-stride over rows), the row
//    held in registers with 16-byte vector accesses, cols baked in.
//      addends: h = in[0] + in[1] + ... (f32, rounded to dtype, stored: the
//                next residual; operands may broadcast over rows), x = h
//      else:     x = in[0]
//      mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + eps)
//      y = (x - mean) * rstd * gamma + beta   (gamma, beta: f32 [C]; beta optional)
//  - AdamW: every parameter in one launch over a device table of tensors and
//    65536-element chunks, with the CPU adamw op's arithmetic: lr, step,
//    grad_norm read from device memory (graph replay sees new values),
//      clip = max_norm > 0 ? min(1, max_norm / (gn + 1e-6)) : 1;  g *= clip
//      m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//      p = p * (1 - lr wd) - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
//    weight decay per tensor, optional bf16 shadow refreshed; betas/eps/
//    max_norm and the step dtype are baked into the source; float4 path per
//    tensor when its pointers are aligned and numel % 4 == 0.
//    Per tensor, for a smaller training state (CudaOptions::memory, lean):
//    m and v stored bf16 (states_bf16), each rounded stochastically from the
//    f32 value the update used: 16 bits of a counter-based hash of (seed,
//    stream m or v, element, step) added to the f32 bits before truncation,
//    so the rounding is unbiased (round to nearest would freeze v wherever
//    (1 - b2) g^2 is under half a bf16 ulp of v) and repeats bitwise; the
//    parameter in the split layout (split, SplitF32): exact f32 arithmetic,
//    and the hi plane is the bf16 weight the GEMMs read, with no shadow.
//
// Every kernel takes one parameter struct by value (below; the generated
// source declares the same layout and checks its size). Tests:
// rowwise_test (sources, validation, NVRTC), rowwise_host_exec_test (runs the
// generated sources on the host with emulated threads against f64
// references); on a GPU: rowwise_gpu_check (references, then timing at the
// GPT-2 124M shapes).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "kernels/cuda/codegen/nvrtc_cache.h"

namespace loom::kernels::cuda::codegen {

// ---- Parameter structs (layouts mirrored in the generated source) ----
constexpr int kMaxLnAddends = 4;
struct LnParams {
  const void* in[kMaxLnAddends] = {};  // plain: in[0] = x [rows, C]; else the addends
  const float* gamma = nullptr;        // [C]
  const float* beta = nullptr;         // [C] (has_bias only)
  void* h = nullptr;                   // [rows, C] dtype: the sum of the addends (not plain)
  void* y = nullptr;                   // [rows, C] dtype
  float* mean = nullptr;         // [rows] (not for RMSNorm)
  float* rstd = nullptr;         // [rows]
  int64_t rows = 0;
};
struct AdamWTensor {
  // f32 [numel]; split: the two 16-bit planes of SplitF32 (hi, which a GEMM
  // reads as the bf16 weight, then lo), 4 * numel bytes either way.
  void* param = nullptr;
  const void* grad = nullptr;
  void* m = nullptr;           // f32, or bf16 with states_bf16
  void* v = nullptr;
  void* param_bf16 = nullptr;  // optional shadow (null with split: hi is the shadow)
  int64_t numel = 0;
  double weight_decay = 0.0;
  int32_t grad_bf16 = 0;
  int32_t vec4 = 0;         // set by AdamWTable: float4 path allowed
  int32_t states_bf16 = 0;  // m and v stored bf16, stochastically rounded
  int32_t split = 0;        // param in the split layout
  uint32_t seed = 0;        // this tensor's rounding stream (distinct per tensor)
  int32_t pad = 0;
};
struct AdamWChunk {
  int32_t tensor = 0;
  int32_t pad = 0;
  int64_t start = 0;
};
struct AdamWParams {
  const AdamWTensor* tensors = nullptr;  // device table
  const AdamWChunk* chunks = nullptr;    // device table
  const float* lr = nullptr;
  const void* step = nullptr;
  const float* grad_norm = nullptr;  // may be null when max_norm == 0
  int64_t num_chunks = 0;
};
constexpr int64_t kAdamWChunk = 65536;
// The split layout of f32 values (AdamWTensor::split): planes[0, n) holds hi,
// the value's bf16 rounding (half away from zero on the bits), and planes[n,
// 2n) lo = bits - (hi << 16) as a signed 16-bit remainder, so that JoinF32
// gives back every f32 bit pattern exactly. Host side of the device code.
void SplitF32(const float* x, int64_t n, uint16_t* planes);
void JoinF32(const uint16_t* planes, int64_t n, float* x);
// Host side of the tables: sets vec4 per tensor and lists the chunks.
std::vector<AdamWChunk> AdamWTable(std::vector<AdamWTensor>& tensors);

// ---- Specs ----
// One operand of the prologue sum. period 0: a [rows, C] tensor; P > 0: a
// [P, C] tensor broadcast over leading dims (row r reads row r % P; P = 1 is a
// [C] bias, P = T the position embedding of [B, T, C]).
struct LnAddend {
  DType dtype = DType::kF32;
  int64_t period = 0;
};
struct LnSpec {
  int64_t cols = 0;
  DType dtype = DType::kF32;  // x (plain), h and y storage: kF32 or kBF16
  // y's storage when it differs from x's and h's: an f32 residual stream
  // normalised into a bf16 GEMM operand (PlanOptions::f32_residual).
  std::optional<DType> y_dtype;
  // Empty: plain layernorm of x = in[0]. Two or more: the prologue
  // h = in[0] + in[1] + ... (f32, left to right, rounded once to dtype) is
  // stored and normalised (the `add -> layernorm` fusion).
  std::vector<LnAddend> addends;
  bool has_bias = true;
  // RMSNorm instead (no mean subtracted, no bias; mean is not written):
  //   rstd = 1 / sqrt(sum(x^2)/C + eps),  y = x * rstd * gamma
  bool rms = false;
  double eps = 1e-5;
  int threads = 0;  // 0 = chosen by the generator (multiple of 32, <= 1024)
};
struct AdamWSpec {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, max_norm = 0.0;
  DType step_dtype = DType::kF32;  // kF32, kI32 or kI64
  int threads = 256;
};

enum class RowKind { kLayerNorm, kAdamW };

// Generated source; kernels[0] is the kernel.
struct RowSource {
  RowKind kind = RowKind::kLayerNorm;
  std::string source;
  std::vector<std::string> kernels;
  int threads = 256;
  int vec = 1;  // elements per vector access
  int64_t cols = 0;
  DType dtype = DType::kF32;  // row storage dtype
  DType y_dtype = DType::kF32;   // layernorm: y's storage (dtype unless LnSpec::y_dtype)
  std::vector<LnAddend> addends;  // layernorm
  bool has_bias = false;         // layernorm
  bool rms = false;              // layernorm: the RMSNorm form
};
absl::StatusOr<RowSource> GenerateLayerNorm(const LnSpec& s);
absl::StatusOr<RowSource> GenerateAdamW(const AdamWSpec& s);
// Grid size for `rows` rows (or chunks): one block per row, capped.
int64_t RowGrid(int64_t rows);

class RowwiseKernel {
 public:
  static absl::StatusOr<std::unique_ptr<RowwiseKernel>> LayerNorm(const LnSpec& s, const CodegenOptions& o = {});
  static absl::StatusOr<std::unique_ptr<RowwiseKernel>> AdamW(const AdamWSpec& s, const CodegenOptions& o = {});
  // A kernel of a generated source (GenerateLayerNorm, GenerateAdamW) without
  // its CUBIN, which comes from SetCompiled (job() through CompileAll, see
  // nvrtc_cache.h). Launch refuses a kernel without its CUBIN.
  static absl::StatusOr<std::unique_ptr<RowwiseKernel>> Uncompiled(absl::StatusOr<RowSource> gen);
  CompileJob job() const;
  void SetCompiled(CompiledCubin c);

  const RowSource& gen() const { return gen_; }
  const std::string& name() const { return gen_.kernels[0]; }
  bool from_cache() const { return from_cache_; }

  // Asynchronous launches on `stream`; InvalidArgument for a kind mismatch, a
  // null or misaligned pointer (the vector width needs vec * size-aligned rows).
  absl::Status Launch(const LnParams& p, StreamHandle stream) const;
  absl::Status Launch(const AdamWParams& p, StreamHandle stream) const;

 private:
  RowwiseKernel() = default;
  static absl::StatusOr<std::unique_ptr<RowwiseKernel>> Build(absl::StatusOr<RowSource> gen,
                                                              const CodegenOptions& o);
  absl::Status Ensure(RowKind kind) const;

  RowSource gen_;
  std::string cubin_;
  bool from_cache_ = false;
  mutable std::mutex mu_;
  mutable std::vector<void*> handles_;  // per gen_.kernels, loaded on first launch
};

}  // namespace loom::kernels::cuda::codegen
