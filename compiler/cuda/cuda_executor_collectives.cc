// CudaExecutor (cuda_executor_impl.h): the launches of a parallel program's
// ops (plan_collectives.h). A kCollective launch is a host call between the
// device launches: it waits for the stream, then runs the group's
// communicator (CudaOptions::communicators) on the device buffers; the step's
// CUDA graphs end before it and start again after it (Capture). vocab_onehot
// is a device kernel at this rank's vocabulary block.
#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/embedding.h"

namespace loom::compiler::cuda::cuda_executor_internal {

absl::Status Impl::BuildCollective(const Launch& l) {
  const std::string group = l.attrs.GetString("group", "world");
  const std::string op = l.op;
  auto it = o_.communicators.find(group);
  comm::Communicator* c = it == o_.communicators.end() ? nullptr : it->second;
  const int64_t world = l.attrs.GetInt("world", c ? c->size() : 1);
  if (c != nullptr && c->size() != world)
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": group '", group, "' has ", c->size(), " ranks but the node says world ", world));
  const int in = l.inputs[0], out = l.outputs[0];
  const void* src = Ptr(in);
  void* dst = Ptr(out);
  const int64_t nb = plan_.Bytes(out);
  cudaStream_t s = stream_;
  if (c == nullptr) {  // a group of one rank: the result is the operand
    if (world != 1)
      return absl::FailedPreconditionError(absl::StrCat(op, ": no communicator is bound for group '", group,
                                                        "' (world ", world, "): CudaOptions::communicators"));
    calls_.push_back([=]() {
      if (src != dst) LOOM_CU(cudaMemcpyAsync(dst, src, nb, cudaMemcpyDeviceToDevice, s), "collective: copy");
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }
  LOOM_ASSIGN_OR_RETURN(comm::ReduceKind kind, comm::ParseReduceKind(l.attrs.GetString("reduce", "sum")));
  const loom::Device dev = loom::Device::CUDA(o_.device);
  Tensor tin = Tensor::Wrap(const_cast<void*>(src), Sh(in), Dt(in), dev);
  Tensor tout = Tensor::Wrap(dst, Sh(out), Dt(out), dev);
  calls_.push_back([=]() mutable {
    if (op == "all_reduce" && src != dst)
      LOOM_CU(cudaMemcpyAsync(dst, src, nb, cudaMemcpyDeviceToDevice, s), "all_reduce: copy");
    LOOM_CU(cudaStreamSynchronize(s), "collective: wait for the step");
    absl::Status st = op == "all_reduce"      ? c->AllReduce(tout, tout, kind)
                      : op == "all_gather"    ? c->AllGather(tin, tout, 0)
                      : op == "reduce_scatter" ? c->ReduceScatter(tin, tout, 0, kind)
                                               : absl::UnimplementedError(absl::StrCat("collective op ", op));
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(op, " over group '", group, "': ", st.message()));
    return absl::OkStatus();
  });
  host_calls_.push_back(calls_.size() - 1);
  return absl::OkStatus();
}

absl::Status Impl::BuildVocabOnehot(const Launch& l) {
  const int ids = l.inputs[0], onehot = l.outputs[0], valid = l.outputs[1];
  const kern::Dt idt = ToDt(Dt(ids)), odt = ToDt(Dt(onehot)), vdt = ToDt(Dt(valid));
  const int64_t rows = Numel(ids), cols = Sh(onehot)[1];
  const int64_t rank = l.attrs.GetInt("rank", 0), ignore = l.attrs.GetInt("ignore_index", -100);
  const void* t = Ptr(ids);
  void* oh = Ptr(onehot);
  void* ok = Ptr(valid);
  cudaStream_t s = stream_;
  calls_.push_back([=]() {
    return CudaErr(kern::VocabOnehot(idt, odt, vdt, rows, cols, rank, ignore, t, oh, ok, s), "vocab_onehot");
  });
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
