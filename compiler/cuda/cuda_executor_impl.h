// Private to compiler/cuda (include only from cuda_executor*.cc): the class
// behind CudaExecutor (cuda_executor.h), whose member functions are defined in
//   cuda_executor.cc            Create, Init, steps (eager / CUDA graph), outputs, Describe
//   cuda_executor_buffers.cc    device buffers, input staging, scratch size, CUDA helpers
//   cuda_executor_profile.cc    the CudaOptions::profile table
//   cuda_executor_build.cc      Build: one closure per Launch; GEMMs, pointwise kernels, copies
//   cuda_executor_kernels.cc    ... embedding, sum_to, layernorm, rmsnorm, rope, cross-entropy
//   cuda_executor_attention.cc  ... attention (flash kernels / the SDPA dispatcher)
//   cuda_executor_optimizer.cc  ... grad norm and the multi-tensor AdamW
//   cuda_executor_collectives.cc ... a parallel program's collectives (host
//                               calls between launches) and vocab_onehot
// Every kernel they launch lives in kernels/cuda (raw-pointer kernels,
// layernorm.h, gemm.h, attention/, and the generators in codegen/).
// Helpers are static members so that no other symbol leaves these files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
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
#include "compiler/cuda/cuda_executor.h"
#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"
#include "kernels/cuda/attention/sdpa_dispatch.h"
#include "kernels/cuda/codegen/pointwise.h"
#include "kernels/cuda/codegen/rowwise.h"
#include "kernels/cuda/dtype_code.h"

namespace loom::compiler::cuda::cuda_executor_internal {

namespace cg = ::loom::kernels::cuda::codegen;
namespace kern = ::loom::kernels::cuda::kern;
using Call = std::function<absl::Status()>;

#define LOOM_CU(expr, what) LOOM_RETURN_IF_ERROR(CudaErr(static_cast<int>(expr), what))

class Impl final : public CudaExecutor {
 public:
  ~Impl() override;

  absl::Status Init(const ir::Graph& g, const CudaOptions& o);
  void ForceDry() { force_dry_ = true; }  // Init builds without a device (DryBuild)
  absl::Status SetInput(int k, const Tensor& host) override;
  absl::Status ZeroInput(int k) override;
  absl::Status Step(absl::Span<const std::pair<int, Tensor>> step_inputs) override;
  bool graph_replay() const override { return !execs_.empty(); }
  absl::Status Capture();
  absl::Status Replay();
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
  static kern::Dt ToDt(DType d);
  // The generators' options: CudaOptions::kernel_cache.
  cg::CodegenOptions Codegen() const {
    cg::CodegenOptions c;
    c.cache_dir = o_.kernel_cache;
    return c;
  }

  // cuda_executor_buffers.cc: buffers and copies.
  absl::StatusOr<void*> Alloc(int64_t bytes);
  // Pinned host memory the device reads and writes in place
  // (CudaOptions::offload_optimizer_state): its device address, and its host
  // address in *host. Dry: fake addresses.
  absl::StatusOr<void*> AllocMappedHost(int64_t bytes, void** host);
  // Input k offloaded: its host address (null: on the device).
  void* OnHost(int k) const { return host_view_.empty() ? nullptr : host_view_[k]; }
  absl::Status AllocBuffers(CudaBuildStats* stats);
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
  // With poison_arena and guards: launch `pos`'s call also fills the guards
  // its buffers are born with and copies those that die with it to the host.
  void WrapGuards(int pos);
  // After a poisoned step (CudaOptions::arena_guard_bytes): Internal naming
  // the first guard some launch wrote.
  absl::Status CheckGuards();
  absl::Status StageCopy(int k, const Tensor& t);
  absl::StatusOr<Tensor> ToHost(int v);
  int64_t ScratchBytes(const Launch& l) const;

  // cuda_executor.cc / cuda_executor_profile.cc: running the calls.
  absl::Status RunCalls(bool profile = false);
  // The device launches between host calls: [begin, end) of calls_.
  std::vector<std::pair<size_t, size_t>> Segments() const;
  void PrintProfile() const;

  // cuda_executor_attention.cc.
  // read_roots_: the roots whose bytes a launch reads or that are graph
  // inputs or outputs. An attention forward whose lse is none of them (no
  // backward follows: a forward-only program) runs without it.
  void MarkReadRoots();
  bool IsRead(int v) const { return plan_.root[v] >= 0 && read_roots_[plan_.root[v]]; }
  bool UseFlash(const Launch& l) const;
  loom::kernels::cuda::attention::SdpaArgs AttnCallArgs(const Launch& l) const;
  loom::kernels::cuda::attention::SdpaArgs MathCallArgs(const Launch& l) const;
  void AddAttnCall(const loom::kernels::cuda::attention::SdpaArgs& a, bool backward);
  absl::Status BuildAttention(const Launch& l, std::string* desc);

  // cuda_executor_build.cc: Build dispatches on the launch kind; each Build*
  // appends one closure to calls_ (and may add to the description).
  absl::StatusOr<Call> CopyCall(int in, int64_t in_offset, std::vector<int64_t> in_strides, Shape out_shape,
                                int out, int64_t out_offset, std::vector<int64_t> out_strides);
  absl::Status Build(const Launch& l);
  absl::Status CompileKernels(CudaBuildStats* stats);
  absl::Status BuildGemm(const Launch& l, std::string* desc);
  absl::Status BuildPointwise(const Launch& l);
  absl::Status BuildCopies(const Launch& l);
  absl::Status BuildCopyBack(const Launch& l);
  // cuda_executor_kernels.cc.
  absl::Status BuildEmbedding(const Launch& l);
  absl::Status BuildSumTo(const Launch& l);
  absl::Status BuildRowReduce(const Launch& l);
  absl::Status BuildLayerNorm(const Launch& l, std::string* desc);
  absl::Status BuildLayerNormBackward(const Launch& l);
  absl::Status BuildRmsNorm(const Launch& l);
  absl::Status BuildRope(const Launch& l);
  absl::Status BuildCrossEntropy(const Launch& l);
  // cuda_executor_optimizer.cc.
  absl::Status BuildGradNorm(const Launch& l, std::string* desc);
  absl::Status BuildAdamW(const Launch& l, std::string* desc);
  // cuda_executor_collectives.cc.
  absl::Status BuildCollective(const Launch& l);
  absl::Status BuildVocabOnehot(const Launch& l);

  struct Staging {
    void* host[2] = {nullptr, nullptr};
    cudaEvent_t done[2] = {nullptr, nullptr};
  };

  ir::Graph g_;
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
  void* guard_host_ = nullptr;  // pinned: every guard's bytes after a poisoned step (CheckGuards)
  AttnRoute attention_ = AttnRoute::kDispatch;
  struct AttnCall {
    size_t launch;  // index into desc_
    loom::kernels::cuda::attention::SdpaArgs args;
    bool backward;
  };
  std::vector<AttnCall> attn_calls_;  // dispatched attention launches, for Describe()
  std::vector<char> read_roots_;      // per plan value (MarkReadRoots)
  int inference_attention_ = 0;       // attention forwards built without lse
  std::vector<Call> calls_;
  // Indices of calls_ that run on the host (collectives): the step's CUDA
  // graphs are the runs of device launches between them.
  std::vector<size_t> host_calls_;
  std::vector<std::pair<size_t, size_t>> segments_;  // Segments(), after Build
  std::vector<std::string> desc_;
  std::vector<double> prof_ms_;  // per launch, summed over profiled steps
  int profiled_steps_ = 0;
  std::vector<std::unique_ptr<cg::PointwiseKernel>> kernels_;
  std::vector<std::unique_ptr<cg::RowwiseKernel>> row_kernels_;
  std::vector<std::unique_ptr<cg::PwBody>> bodies_;
  std::vector<void*> owned_, pinned_;
  std::vector<cudaEvent_t> events_;
  std::map<int, Staging> staging_;
  std::map<std::string, float*> rope_tables_;  // by "T D theta offset" (BuildRope)
  int64_t slot_ = 0, steps_ = 0;
  int64_t device_bytes_ = 0;
  bool force_dry_ = false;
  int64_t host_bytes_ = 0;         // mapped host memory (offloaded inputs)
  std::vector<void*> host_view_;   // per graph input: its host address when offloaded
  // One captured graph per segment (Segments()), replayed in order with the
  // host calls between them.
  std::vector<cudaGraph_t> graphs_;
  std::vector<cudaGraphExec_t> execs_;
};

}  // namespace loom::compiler::cuda::cuda_executor_internal
