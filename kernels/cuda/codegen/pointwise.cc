// PointwiseKernel: compilation through the shared NVRTC / disk cache
// (nvrtc_cache.h) and the launch (see pointwise.h). Builds without the toolkit
// stop after generating the source with Unavailable.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "kernels/cuda/codegen/nvrtc_cache.h"
#include "kernels/cuda/codegen/pointwise.h"
#include "kernels/cuda/codegen/pointwise_internal.h"

namespace loom::kernels::cuda::codegen {
namespace {
// Bump when the generator changes meaning.
constexpr char kCodegenVersion[] = "loom-pw-1";
}  // namespace

int ChooseVectorPath(const GeneratedKernel& gen, absl::Span<const void* const> inputs,
                     absl::Span<const DType> in_dtypes, const void* out, DType out_dtype) {
  if (!gen.vectorizable) return 0;
  // The W-wide path needs every linearly accessed tensor aligned like its
  // vector type: min(16, W * element size) bytes.
  const uintptr_t w = static_cast<uintptr_t>(gen.vec_width);
  auto aligned = [w](const void* base, int64_t offset, DType t) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset) * DTypeSize(t);
    return p % std::min<uintptr_t>(16, w * DTypeSize(t)) == 0;
  };
  const IndexPlan& plan = gen.plan;
  if (!aligned(out, plan.offsets[0], out_dtype)) return 0;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (plan.access[k + 1] == IndexPlan::Access::kLinear && !aligned(inputs[k], plan.offsets[k + 1], in_dtypes[k]))
      return 0;
  return 1;
}

absl::StatusOr<std::unique_ptr<PointwiseKernel>> PointwiseKernel::Uncompiled(const PwSpec& spec) {
  std::unique_ptr<PointwiseKernel> k(new PointwiseKernel());
  LOOM_ASSIGN_OR_RETURN(k->gen_, GeneratePointwiseSource(spec));
  for (const PwOperand& op : spec.inputs) k->in_dtypes_.push_back(op.dtype);
  k->out_dtype_ = spec.out_dtype;
  return k;
}

CompileJob PointwiseKernel::job() const { return {gen_.source, gen_.name, kCodegenVersion, "pointwise codegen"}; }

void PointwiseKernel::SetCompiled(CompiledCubin c) {
  cubin_ = std::move(c.cubin);
  cache_path_ = std::move(c.cache_path);
  from_cache_ = c.from_cache;
}

absl::StatusOr<std::unique_ptr<PointwiseKernel>> PointwiseKernel::Compile(const PwSpec& spec,
                                                                          const CodegenOptions& o) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<PointwiseKernel> k, Uncompiled(spec));
  LOOM_ASSIGN_OR_RETURN(CompiledCubin c,
                        CompileCached(k->gen_.source, k->gen_.name, kCodegenVersion, o, "pointwise codegen"));
  k->SetCompiled(std::move(c));
  return k;
}

// Loaded modules are shared process-wide (nvrtc_cache.h LoadKernel) and never
// unloaded: identical regions (one per layer) load one module, and a kernel
// handle stays valid for CUDA graphs captured with it.
PointwiseKernel::~PointwiseKernel() = default;

absl::Status PointwiseKernel::EnsureLoaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (kernel_ != nullptr) return absl::OkStatus();
  if (cubin_.empty())
    return absl::FailedPreconditionError(
        absl::StrCat("pointwise launch ", gen_.name, ": not compiled (Uncompiled without SetCompiled)"));
  LOOM_ASSIGN_OR_RETURN(void* kern, LoadKernel(cubin_, gen_.name));
  num_sms_ = DeviceSmCount();
  kernel_ = kern;
  return absl::OkStatus();
}

absl::Status PointwiseKernel::Launch(absl::Span<const void* const> inputs, void* out, StreamHandle stream) const {
  if (inputs.size() != in_dtypes_.size())
    return absl::InvalidArgumentError(absl::StrCat("pointwise launch ", gen_.name, ": inputs: expected ",
                                                   in_dtypes_.size(), " pointers, got ", inputs.size()));
  if (!BuiltWithCuda()) return absl::UnavailableError("pointwise codegen: this build has no CUDA");
  if (gen_.numel == 0) return absl::OkStatus();
  if (out == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("pointwise launch ", gen_.name, ": out: null pointer"));
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k] == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat("pointwise launch ", gen_.name, ": inputs[", k, "]: null pointer"));
  LOOM_RETURN_IF_ERROR(EnsureLoaded());
  int vec = ChooseVectorPath(gen_, inputs, in_dtypes_, out, out_dtype_);
  const int64_t threads = 256;
  const int64_t per_thread = vec ? gen_.vec_width : 1;
  int64_t blocks = (gen_.numel + threads * per_thread - 1) / (threads * per_thread);
  blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t{num_sms_} * 16));
  std::vector<const void*> ptrs(inputs.begin(), inputs.end());
  std::vector<void*> args;
  for (const void*& p : ptrs) args.push_back(&p);
  args.push_back(&out);
  args.push_back(&vec);
  return LaunchKernel(kernel_, blocks, static_cast<int>(threads), args.data(), stream, gen_.name);
}

}  // namespace loom::kernels::cuda::codegen
