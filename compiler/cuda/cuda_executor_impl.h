// Private to compiler/cuda (include only from cuda_executor*.cc): the class
// behind CudaExecutor (cuda_executor.h), whose member functions are defined in
//   cuda_executor.cc            Create, Init, steps (eager / CUDA graph), outputs, Describe
//   cuda_executor_buffers.cc    device buffers, input staging, scratch size, CUDA helpers
//   cuda_executor_profile.cc    the LOOM_CUDA_PROFILE table
//   cuda_executor_build.cc      Build: one closure per Launch (GEMM, pointwise, copies, ...)
//   cuda_executor_kernels.cc    ... the hand-written kernels (embedding, norms, rope, loss)
//   cuda_executor_attention.cc  ... attention (flash / SDPA dispatcher / simple kernels)
//   cuda_executor_optimizer.cc  ... grad norm and multi-tensor AdamW
//   cuda_executor_rowwise.cc    ... the generated row-wise kernels
// Helpers are static members so that no other symbol leaves these files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/status.h"
#include "base/tensor.h"
#include "compiler/cuda/codegen/pointwise.h"
#include "compiler/cuda/codegen/rowwise.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/cuda/lowering_kernels.h"
#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"
#include "kernels/cuda/attention/sdpa_dispatch.h"

namespace loom::compiler::cuda::cuda_executor_internal {

namespace cg = ::loom::compiler::cuda_codegen;
using Call = std::function<absl::Status()>;

#define LOOM_CU(expr, what) LOOM_RETURN_IF_ERROR(CudaErr(static_cast<int>(expr), what))

class Impl final : public CudaExecutor {
 public:
  ~Impl() override;

  absl::Status Init(const Graph& g, const CudaOptions& o);
  absl::Status SetInput(int k, const Tensor& host) override;
  absl::Status Step(absl::Span<const std::pair<int, Tensor>> step_inputs) override;
  bool graph_replay() const override { return exec_ != nullptr; }
  absl::Status Capture();
  absl::StatusOr<Tensor> Output(int i) override;
  absl::StatusOr<Tensor> OutputDevice(int i) override;
  absl::StatusOr<Tensor> Input(int k) override;
  absl::Status Synchronize() override;
  std::string Describe() const override;
  int64_t device_bytes() const override { return device_bytes_; }
  const CudaPlan& plan() const override { return plan_; }

 private:
  // cuda_executor_buffers.cc: helpers.
  static absl::Status CudaErr(int e, absl::string_view what);
  static bool GradNormMultiOn();
  static kern::Dt ToDt(DType d);

  // cuda_executor_buffers.cc: buffers and copies.
  absl::StatusOr<void*> Alloc(int64_t bytes);
  void* Ptr(int v) const {
    const int r = plan_.root[v];
    if (plan_.input_of[r] >= 0) return input_buf_[plan_.input_of[r]];
    if (shadow_of_[r] >= 0) return shadow_buf_[shadow_of_[r]];
    return static_cast<char*>(arena_) + plan_.offset[r];
  }
  DType Dt(int v) const { return plan_.metas[v].dtype; }
  const Shape& Sh(int v) const { return plan_.metas[v].shape; }
  int64_t Numel(int v) const { return NumElements(Sh(v)); }
  absl::Status CheckInput(int k, const Tensor& t) const;
  absl::Status StageCopy(int k, const Tensor& t);
  absl::StatusOr<Tensor> ToHost(int v);
  int64_t ScratchBytes(const Launch& l) const;

  // cuda_executor.cc / cuda_executor_profile.cc: running the calls.
  absl::Status RunCalls(bool profile = false);
  void PrintProfile() const;

  // cuda_executor_attention.cc.
  bool UseFlash(const Launch& l) const;
  loom::cuda::SdpaArgs AttnCallArgs(const Launch& l) const;
  void AddAttnCall(const loom::cuda::SdpaArgs& a, bool backward);
  kern::AttnArgs SimpleArgs(const Launch& l, int q, int k, int v) const;
  absl::Status BuildAttention(const Launch& l, cudaStream_t s, void* scratch, std::string* desc);

  // cuda_executor_build.cc and the Build* files named above.
  absl::StatusOr<Call> CopyCall(int in, int64_t in_offset, std::vector<int64_t> in_strides, Shape out_shape,
                                int out, int64_t out_offset, std::vector<int64_t> out_strides);
  DType g_dtype_or(int v) const { return v < static_cast<int>(g_.values().size()) ? g_.meta(v).dtype : Dt(v); }
  absl::Status Build(const Launch& l);
  absl::Status BuildKernel(const Launch& l, cudaStream_t s, void* scratch);
  absl::Status BuildOptimizer(const Launch& l, cudaStream_t s, void* scratch, std::string* desc);
  absl::StatusOr<bool> BuildRowwise(const Launch& l, std::string* desc);
  // cuda_executor_optimizer.cc (instantiated there for both AdamW table types).
  template <typename Entry>
  Entry AdamWTensorEntry(const Launch& l, int t) const;

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

}  // namespace loom::compiler::cuda::cuda_executor_internal
