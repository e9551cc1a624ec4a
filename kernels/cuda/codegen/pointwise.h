// Pointwise CUDA code generation: one CUDA C++ kernel per elementwise region
// (a fused node's subgraph, or a single elementwise/copy/cast/fill op), compiled
// with NVRTC to a CUBIN when the Program is built and cached on disk. The
// region comes as a PwBody, a plain list of ops that the caller fills in (the
// compiler's CUDA lowering converts its IR: compiler/cuda/pointwise_body.h).
//
//   PwBody body = SingleOpBody("gelu", Attrs{{"approximate", "tanh"}}, 1);
//   PwSpec spec;
//   spec.body = &body;
//   spec.inputs = {{DType::kBF16, ContiguousStrides(shape)},
//                  {DType::kF32, BroadcastStrides(bias_shape, shape)}};
//   spec.out_shape = shape;
//   spec.out_dtype = DType::kBF16;
//   LOOM_ASSIGN_OR_RETURN(auto k, PointwiseKernel::Compile(spec));
//   LOOM_RETURN_IF_ERROR(k->Launch({x_ptr, bias_ptr}, out_ptr, stream));
//
// Semantics: for every output index (row-major over out_shape), each operand
// is read at offset + sum(index[d] * strides[d]) (element units, storage dtype
// converted to f32), the body is evaluated in f32 registers with the CPU
// kernels' formulas, and the result is rounded once (RN) to out_dtype and
// stored at out_offset + sum(index[d] * out_strides[d]). An empty body (no
// nodes, output = input 0) is a copy or cast; a same-dtype copy moves the raw
// element (integers are never routed through f32).
//
// Nodes' compute_dtype is ignored (math is f32); a cast node inside a body
// rounds to its dtype (bf16/f16 RN, integers truncate) and continues in f32.
// Kernel: grid-stride loop, 256 threads; when the output is contiguous and the
// linear operands are aligned (checked per launch), W elements per thread with
// 16-byte vector loads/stores (W = 8 if a linear tensor is 16-bit, else 4);
// broadcast and strided operands use index math baked in as constants (dims
// merged where contiguous; 32-bit indices when everything fits).
//
// Storage dtypes: f32, bf16, f16, i32, i64 (f64 and bool are rejected).
// Body ops: add sub mul div maximum relu_backward neg exp log sqrt rsqrt tanh
// sigmoid relu abs scale add_scalar pow_scalar gelu gelu_backward silu
// silu_backward cast fill zeros_like ones_like broadcast_to. Anything else is
// InvalidArgument naming the op (never silently wrong).
//
// The generated source is self-contained (no CUDA headers: bf16/f16
// conversions are inline PTX), compiled with -arch=<arch> -std=c++17
// -default-device and without --use_fast_math. NVRTC is dlopen'ed at run time
// ($LOOM_NVRTC_LIB, libnvrtc.so.13, libnvrtc.so.12, the build's toolkit), so
// binaries do not need it unless they compile. The CUBIN is cached as
// <cache_dir>/<fnv64 of codegen version+arch+source>_nvrtc<version>.cubin with
// a checksummed header, written atomically (tmp + rename); a corrupt cache
// file is recompiled. Where NVRTC cannot be opened, any valid cached entry for
// the same source and arch is used (a cache filled elsewhere and shipped).
// Builds without CUDA generate the source but Compile returns Unavailable.
// Environment: LOOM_KERNEL_CACHE (cache folder), LOOM_NVRTC_LIB (NVRTC path).
//
// Tests: pointwise_test (plans, sources, validation, NVRTC, cache),
// pointwise_host_exec_test (the generated kernels run on the host through a
// shim, against f64 references); on a GPU: pointwise_gpu_check (staged by
// bench/cuda/stage.sh, run by bench/cuda/run_checks.sh).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/dtype.h"
#include "kernels/cuda/codegen/nvrtc_cache.h"
#include "kernels/registry.h"

namespace loom::kernels::cuda::codegen {

struct PwOperand {
  DType dtype = DType::kF32;     // storage dtype: kF32, kBF16, kF16, kI32, kI64
  std::vector<int64_t> strides;  // element strides over the OUTPUT's index space
                                 // (same rank as out_shape; 0 = broadcast)
  int64_t offset = 0;            // element offset
};

// One op of a body: `op` over `inputs`, which are value ids (0 ..
// num_inputs - 1 the operands, num_inputs + k the result of nodes[k]), with
// the op's attributes (as the op registry names them).
struct PwNode {
  std::string op;
  std::vector<int> inputs;
  kernels::Attrs attrs;
};
// The computation of a kernel, straight-line: nodes in order, each one result.
// An EMPTY body (no nodes, output = 0: operand 0) is a copy or cast.
struct PwBody {
  int num_inputs = 0;
  std::vector<PwNode> nodes;
  int output = 0;  // the value id returned
};
// The body of one op over num_inputs operands.
PwBody SingleOpBody(const std::string& op, const kernels::Attrs& attrs, int num_inputs);
// A copy or cast of one operand (an empty body).
PwBody CopyBody();

struct PwSpec {
  const PwBody* body = nullptr;  // operands in the order of `inputs`
  std::vector<PwOperand> inputs;
  std::vector<int64_t> out_shape;
  DType out_dtype = DType::kF32;
  std::vector<int64_t> out_strides;  // empty = contiguous
  int64_t out_offset = 0;
};

// Strides for an input of `in_shape` broadcast (numpy/trailing-aligned) to out_shape.
std::vector<int64_t> BroadcastStrides(absl::Span<const int64_t> in_shape,
                                      absl::Span<const int64_t> out_shape);

// ---- Index plan (host-evaluable; the generated index code is emitted from it) ----
// The output index space after dropping size-1 dims and merging dims that are
// contiguous for the output and every operand. dims are outermost first.
struct IndexPlan {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;  // [tensor][dim]; tensor 0 = output, k+1 = input k
  std::vector<int64_t> offsets;               // [tensor]
  // kLinear: offset + i (contiguous over the whole space); kScalar: offset only
  // (all strides 0); kStrided: general index math.
  enum class Access { kLinear, kScalar, kStrided };
  std::vector<Access> access;  // [tensor]
};
IndexPlan MakeIndexPlan(const PwSpec& spec);
// Element offset of tensor `t` (0 = output, k+1 = input k) at output linear index `i`,
// computed exactly as the generated code does.
int64_t PlanOffset(const IndexPlan& plan, int t, int64_t i);

// The generated CUDA C++ source and its kernel symbol (no NVRTC involved).
struct GeneratedKernel {
  std::string source;
  std::string name;
  int64_t numel = 0;
  IndexPlan plan;
  bool vectorizable = false;  // has the W-wide path (taken when pointers are aligned)
  int vec_width = 4;          // W: 8 when a linear tensor is 16-bit (16-byte accesses), else 4
};
absl::StatusOr<GeneratedKernel> GeneratePointwiseSource(const PwSpec& spec);

class PointwiseKernel {
 public:
  // Generates the source, compiles it with NVRTC to a CUBIN for `arch` (or loads
  // <cache_dir>/<hash of source+arch+nvrtc version>.cubin), does NOT touch the
  // GPU. InvalidArgument naming the op/operand for anything unsupported.
  static absl::StatusOr<std::unique_ptr<PointwiseKernel>> Compile(const PwSpec& spec,
                                                                  const CodegenOptions& o = {});
  // Generates the source only; the CUBIN comes later from SetCompiled (with
  // job() through CompileAll, which compiles many kernels in parallel, each
  // distinct source once). Launch refuses a kernel without its CUBIN.
  static absl::StatusOr<std::unique_ptr<PointwiseKernel>> Uncompiled(const PwSpec& spec);
  CompileJob job() const;
  void SetCompiled(CompiledCubin c);
  ~PointwiseKernel();
  const std::string& source() const { return gen_.source; }
  const std::string& name() const { return gen_.name; }  // kernel symbol
  bool from_cache() const { return from_cache_; }
  int64_t numel() const { return gen_.numel; }
  const std::string& cubin() const { return cubin_; }
  const std::string& cache_path() const { return cache_path_; }  // "" when not cached

  // Loads the module on first use (cudaLibraryLoadData / cudaLibraryGetKernel,
  // runtime API, CUDA 12+) and launches on `stream` (cudaStream_t passed as
  // StreamHandle). Unavailable in builds without CUDA. Safe to call during
  // CUDA graph capture once it has been called once outside capture (load
  // happens on the first call).
  absl::Status Launch(absl::Span<const void* const> inputs, void* out, StreamHandle stream) const;

 private:
  PointwiseKernel() = default;
  absl::Status EnsureLoaded() const;

  GeneratedKernel gen_;
  std::vector<DType> in_dtypes_;
  DType out_dtype_ = DType::kF32;
  std::string cubin_;  // empty until compiled
  std::string cache_path_;
  bool from_cache_ = false;
  mutable std::mutex mu_;
  mutable void* kernel_ = nullptr;   // cudaKernel_t
  mutable int num_sms_ = 0;
};

}  // namespace loom::kernels::cuda::codegen
