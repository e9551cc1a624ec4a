#include "collectives/nccl/nccl_backend.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status.h"
#include "collectives/metrics.h"

namespace loom::collectives::nccl {
namespace {

absl::Status CudaError(absl::string_view what, cudaError_t e) {
  return absl::UnavailableError(absl::StrCat("nccl: ", what, ": ", cudaGetErrorString(e)));
}
absl::Status NcclError(absl::string_view what, ncclResult_t r) {
  return absl::InternalError(absl::StrCat("nccl: ", what, ": ", ncclGetErrorString(r)));
}

bool ToNccl(DType dt, ncclDataType_t* out) {
  switch (dt) {
    case DType::kF32: *out = ncclFloat32; return true;
    case DType::kF64: *out = ncclFloat64; return true;
    case DType::kF16: *out = ncclFloat16; return true;
    case DType::kBF16: *out = ncclBfloat16; return true;
    case DType::kI32: *out = ncclInt32; return true;
    case DType::kI64: *out = ncclInt64; return true;
    case DType::kBool: *out = ncclUint8; return true;
  }
  return false;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
  }
  return ncclSum;
}

bool IsReduction(OpType op) {
  return op == OpType::kAllReduce || op == OpType::kReduce || op == OpType::kReduceScatter ||
         op == OpType::kReduceScatterFrom;
}

absl::Status CheckCuda(const Tensor& t, absl::string_view op, absl::string_view arg) {
  if (!t.defined() || !t.device().is_cuda() || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": expected a contiguous CUDA tensor, got ",
                                                   t.defined() ? t.DebugString() : "undefined"));
  }
  return absl::OkStatus();
}

void HostWait(void* arg) {
  auto* flag = static_cast<std::atomic<int>*>(arg);
  while (flag->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

class NcclBackendImpl : public NcclBackend {
 public:
  NcclBackendImpl(ncclComm_t comm, cudaStream_t stream, int rank, int size, int device)
      : comm_(comm), stream_(stream), rank_(rank), size_(size), device_(device) {
    watchdog_ = std::thread([this] { Watchdog(); });
  }
  ~NcclBackendImpl() override {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    watchdog_.join();
    if (abort_thread_.joinable()) abort_thread_.join();
    cudaSetDevice(device_);
    if (!aborted_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
  }

  absl::string_view name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool Supports(OpType op, DType dt, DeviceKind device) const override {
    if (device != DeviceKind::kCUDA) return false;
    return !(IsReduction(op) && dt == DType::kBool);
  }
  void TestOnlyBlockStreamOnHostFlag(std::atomic<int>* flag) override {
    absl::MutexLock l(&mu_);
    cudaLaunchHostFunc(stream_, HostWait, flag);
  }

  absl::StatusOr<WorkPtr> AllReduce(const Tensor& t, const AllReduceOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(t, "all_reduce", "tensor"));
    if (o.stage) return absl::InvalidArgumentError("all_reduce: nccl takes no options.stage (it reads device memory)");
    return Issue(OpType::kAllReduce, t.dtype(), t.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      return ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), dt, ToNccl(o.op), comm_, stream_);
    });
  }
  absl::StatusOr<WorkPtr> Broadcast(const Tensor& t, const BroadcastOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(t, "broadcast", "tensor"));
    LOOM_RETURN_IF_ERROR(CheckRoot(o.root, "broadcast"));
    return Issue(OpType::kBroadcast, t.dtype(), t.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      return ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), dt, o.root, comm_, stream_);
    });
  }
  absl::StatusOr<WorkPtr> Reduce(const Tensor& t, const ReduceOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(t, "reduce", "tensor"));
    LOOM_RETURN_IF_ERROR(CheckRoot(o.root, "reduce"));
    return Issue(OpType::kReduce, t.dtype(), t.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      return ncclReduce(t.raw_data(), t.raw_data(), t.numel(), dt, ToNccl(o.op), o.root, comm_, stream_);
    });
  }
  absl::StatusOr<WorkPtr> AllGather(absl::Span<const Tensor> outputs, const Tensor& input,
                                    const AllGatherOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(input, "all_gather", "input"));
    LOOM_RETURN_IF_ERROR(CheckList(outputs, input, "all_gather", "outputs"));
    return Issue(OpType::kAllGather, input.dtype(), input.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      ncclGroupStart();
      for (int i = 0; i < size_; ++i) {
        ncclBroadcast(input.raw_data(), outputs[i].raw_data(), outputs[i].numel(), dt, i, comm_, stream_);
      }
      return ncclGroupEnd();
    });
  }
  absl::StatusOr<WorkPtr> AllGatherInto(const Tensor& output, const Tensor& input,
                                        const AllGatherOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(input, "all_gather_into", "input"));
    LOOM_RETURN_IF_ERROR(CheckCuda(output, "all_gather_into", "output"));
    if (output.numel() != input.numel() * size_ || output.dtype() != input.dtype()) {
      return absl::InvalidArgumentError("all_gather_into: output: expected size * input elements");
    }
    return Issue(OpType::kAllGatherInto, input.dtype(), input.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      return ncclAllGather(input.raw_data(), output.raw_data(), input.numel(), dt, comm_, stream_);
    });
  }
  absl::StatusOr<WorkPtr> ReduceScatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                        const ReduceScatterOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(output, "reduce_scatter", "output"));
    LOOM_RETURN_IF_ERROR(CheckList(inputs, output, "reduce_scatter", "inputs"));
    return Issue(OpType::kReduceScatter, output.dtype(), output.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      ncclGroupStart();
      for (int i = 0; i < size_; ++i) {
        ncclReduce(inputs[i].raw_data(), i == rank_ ? output.raw_data() : nullptr, inputs[i].numel(), dt,
                   ToNccl(o.op), i, comm_, stream_);
      }
      return ncclGroupEnd();
    });
  }
  absl::StatusOr<WorkPtr> ReduceScatterFrom(const Tensor& output, const Tensor& input,
                                            const ReduceScatterOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(input, "reduce_scatter_from", "input"));
    LOOM_RETURN_IF_ERROR(CheckCuda(output, "reduce_scatter_from", "output"));
    if (input.numel() != output.numel() * size_ || output.dtype() != input.dtype()) {
      return absl::InvalidArgumentError("reduce_scatter_from: input: expected size * output elements");
    }
    return Issue(OpType::kReduceScatterFrom, output.dtype(), output.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      return ncclReduceScatter(input.raw_data(), output.raw_data(), output.numel(), dt, ToNccl(o.op), comm_,
                               stream_);
    });
  }
  absl::StatusOr<WorkPtr> AllToAll(const Tensor& output, const Tensor& input,
                                   const AllToAllOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(input, "all_to_all", "input"));
    LOOM_RETURN_IF_ERROR(CheckCuda(output, "all_to_all", "output"));
    std::vector<int64_t> in_split = o.input_split_sizes, out_split = o.output_split_sizes;
    int64_t in_rows = input.ndim() ? input.dim(0) : 1, out_rows = output.ndim() ? output.dim(0) : 1;
    if (in_split.empty()) in_split.assign(size_, in_rows / size_);
    if (out_split.empty()) out_split.assign(size_, out_rows / size_);
    if (static_cast<int>(in_split.size()) != size_ || static_cast<int>(out_split.size()) != size_) {
      return absl::InvalidArgumentError("all_to_all: options split sizes: expected one entry per rank");
    }
    int64_t in_row = in_rows ? input.numel() / in_rows : 0, out_row = out_rows ? output.numel() / out_rows : 0;
    size_t es = DTypeSize(input.dtype());
    return Issue(OpType::kAllToAll, input.dtype(), input.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      ncclGroupStart();
      int64_t si = 0, ri = 0;
      for (int j = 0; j < size_; ++j) {
        ncclSend(static_cast<char*>(input.raw_data()) + si * in_row * es, in_split[j] * in_row, dt, j, comm_, stream_);
        ncclRecv(static_cast<char*>(output.raw_data()) + ri * out_row * es, out_split[j] * out_row, dt, j, comm_, stream_);
        si += in_split[j];
        ri += out_split[j];
      }
      return ncclGroupEnd();
    });
  }
  absl::StatusOr<WorkPtr> Gather(absl::Span<const Tensor> outputs, const Tensor& input,
                                 const GatherOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(input, "gather", "input"));
    LOOM_RETURN_IF_ERROR(CheckRoot(o.root, "gather"));
    if (rank_ == o.root) LOOM_RETURN_IF_ERROR(CheckList(outputs, input, "gather", "outputs"));
    return Issue(OpType::kGather, input.dtype(), input.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      ncclGroupStart();
      if (rank_ == o.root) {
        for (int i = 0; i < size_; ++i) {
          if (i == rank_) {
            cudaMemcpyAsync(outputs[i].raw_data(), input.raw_data(), input.nbytes(), cudaMemcpyDeviceToDevice, stream_);
          } else {
            ncclRecv(outputs[i].raw_data(), outputs[i].numel(), dt, i, comm_, stream_);
          }
        }
      } else {
        ncclSend(input.raw_data(), input.numel(), dt, o.root, comm_, stream_);
      }
      return ncclGroupEnd();
    });
  }
  absl::StatusOr<WorkPtr> Scatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                  const ScatterOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(output, "scatter", "output"));
    LOOM_RETURN_IF_ERROR(CheckRoot(o.root, "scatter"));
    if (rank_ == o.root) LOOM_RETURN_IF_ERROR(CheckList(inputs, output, "scatter", "inputs"));
    return Issue(OpType::kScatter, output.dtype(), output.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      ncclGroupStart();
      if (rank_ == o.root) {
        for (int i = 0; i < size_; ++i) {
          if (i == rank_) {
            cudaMemcpyAsync(output.raw_data(), inputs[i].raw_data(), output.nbytes(), cudaMemcpyDeviceToDevice, stream_);
          } else {
            ncclSend(inputs[i].raw_data(), inputs[i].numel(), dt, i, comm_, stream_);
          }
        }
      } else {
        ncclRecv(output.raw_data(), output.numel(), dt, o.root, comm_, stream_);
      }
      return ncclGroupEnd();
    });
  }
  absl::StatusOr<WorkPtr> Send(const Tensor& t, int dst, const SendRecvOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(t, "send", "tensor"));
    LOOM_RETURN_IF_ERROR(CheckRoot(dst, "send"));
    return Issue(OpType::kSend, t.dtype(), t.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      return ncclSend(t.raw_data(), t.numel(), dt, dst, comm_, stream_);
    });
  }
  absl::StatusOr<WorkPtr> Recv(const Tensor& t, int src, const SendRecvOptions& o) override {
    LOOM_RETURN_IF_ERROR(CheckCuda(t, "recv", "tensor"));
    LOOM_RETURN_IF_ERROR(CheckRoot(src, "recv"));
    return Issue(OpType::kRecv, t.dtype(), t.nbytes(), o.timeout, [&](ncclDataType_t dt) {
      return ncclRecv(t.raw_data(), t.numel(), dt, src, comm_, stream_);
    });
  }
  absl::StatusOr<WorkPtr> Barrier(const BarrierOptions& o) override {
    {
      absl::MutexLock l(&mu_);
      if (scratch_ == nullptr) {
        cudaSetDevice(device_);
        if (cudaError_t e = cudaMalloc(&scratch_, 4); e != cudaSuccess) return CudaError("barrier scratch", e);
      }
    }
    return Issue(OpType::kBarrier, DType::kF32, 0, o.timeout, [&](ncclDataType_t) {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

 private:
  struct Pending {
    WorkPtr work;
    cudaEvent_t event;
    absl::Time deadline;
    std::string what;
    // Metrics (same hooks as the CPU backends): op, tensor bytes of the call,
    // and the op's latency, from `start` (recorded on the stream before the op)
    // to `event`; `issued` is the host-side fallback when timing fails.
    OpType op;
    int64_t bytes;
    cudaEvent_t start;
    absl::Time issued;
  };

  // Records a finished op into GlobalCollectiveMetrics() and frees its events.
  static void RecordAndRelease(Pending& p, bool ok) {
    absl::Duration latency = absl::Now() - p.issued;
    float ms = 0;
    if (ok && p.start != nullptr && cudaEventElapsedTime(&ms, p.start, p.event) == cudaSuccess) {
      latency = absl::Microseconds(static_cast<double>(ms) * 1000.0);
    }
    GlobalCollectiveMetrics().Record("nccl", std::string(OpTypeName(p.op)), p.bytes, latency, ok);
    if (p.start != nullptr) cudaEventDestroy(p.start);
    p.start = nullptr;
  }

  absl::Status CheckRoot(int r, absl::string_view op) {
    if (r < 0 || r >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": rank ", r, " out of range for group size ", size_));
    }
    return absl::OkStatus();
  }
  absl::Status CheckList(absl::Span<const Tensor> list, const Tensor& like, absl::string_view op,
                         absl::string_view arg) {
    if (static_cast<int>(list.size()) != size_) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": expected ", size_, " tensors"));
    }
    for (size_t i = 0; i < list.size(); ++i) {
      LOOM_RETURN_IF_ERROR(CheckCuda(list[i], op, absl::StrCat(arg, "[", i, "]")));
      if (list[i].dtype() != like.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, "[", i, "]: dtype differs"));
      }
    }
    return absl::OkStatus();
  }

  template <typename F>
  absl::StatusOr<WorkPtr> Issue(OpType op, DType dtype, int64_t bytes, absl::Duration timeout, F&& enqueue) {
    ncclDataType_t dt;
    ToNccl(dtype, &dt);
    if (!Supports(op, dtype, DeviceKind::kCUDA)) {
      return absl::UnimplementedError(absl::StrCat(OpTypeName(op), ": backend nccl does not support ", DTypeName(dtype)));
    }
    if (timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(OpTypeName(op), ": options.timeout: must be positive"));
    }
    absl::MutexLock l(&mu_);
    if (aborted_) {
      return absl::FailedPreconditionError(absl::StrCat("nccl ", OpTypeName(op), ": communicator aborted earlier: ",
                                                        abort_reason_.message()));
    }
    std::string what = absl::StrCat("nccl ", OpTypeName(op), " #", seq_++, " on rank ", rank_);
    cudaSetDevice(device_);
    absl::Time issued = absl::Now();
    cudaEvent_t start = nullptr;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventRecord(start, stream_) != cudaSuccess) {
      if (start != nullptr) cudaEventDestroy(start);
      start = nullptr;  // no GPU timing: the metrics fall back to host time
    }
    ncclResult_t r = enqueue(dt);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (start != nullptr) cudaEventDestroy(start);
      GlobalCollectiveMetrics().Record("nccl", std::string(OpTypeName(op)), bytes, absl::Now() - issued, false);
      return NcclError(what, r);
    }
    cudaEvent_t ev;
    cudaEventCreate(&ev);  // with timing: the metrics read start -> ev
    cudaEventRecord(ev, stream_);
    auto work = std::make_shared<Work>();
    work->Start();
    work->set_abort_hook([this] { AbortComm(absl::CancelledError("aborted by the user")); });
    pending_.push_back(Pending{work, ev, absl::Now() + timeout,
                               absl::StrCat(what, " (timeout ", absl::FormatDuration(timeout), ")"), op, bytes,
                               start, issued});
    return work;
  }

  void AbortComm(const absl::Status& why) {
    std::deque<Pending> failed;
    {
      absl::MutexLock l(&mu_);
      if (aborted_) return;
      aborted_ = true;
      abort_reason_ = why;
      failed.swap(pending_);
    }
    // Fail the ops first: ncclCommAbort may wait for work already on the
    // stream, so it runs on its own thread (joined at destruction).
    for (auto& p : failed) {
      RecordAndRelease(p, false);
      p.work->Finish(absl::Status(why.code(), absl::StrCat(p.what, ": ", why.message(), "; communicator aborted")));
    }
    abort_thread_ = std::thread([this] {
      cudaSetDevice(device_);
      ncclCommAbort(comm_);
    });
  }

  void Watchdog() {
    while (true) {
      absl::Status to_abort;
      {
        absl::MutexLock l(&mu_);
        if (stopping_ && pending_.empty()) return;
        if (stopping_ && aborted_) return;
        while (!pending_.empty()) {
          Pending& p = pending_.front();
          cudaError_t e = cudaEventQuery(p.event);
          if (e == cudaSuccess) {
            RecordAndRelease(p, true);
            p.work->Finish(absl::OkStatus());
            cudaEventDestroy(p.event);
            pending_.pop_front();
            continue;
          }
          ncclResult_t async = ncclSuccess;
          ncclCommGetAsyncError(comm_, &async);
          if (async != ncclSuccess && async != ncclInProgress) {
            to_abort = absl::UnavailableError(absl::StrCat(p.what, ": NCCL async error: ", ncclGetErrorString(async)));
          } else if (absl::Now() > p.deadline) {
            to_abort = absl::DeadlineExceededError(absl::StrCat(p.what, " timed out"));
          }
          break;
        }
      }
      if (!to_abort.ok()) AbortComm(to_abort);
      absl::SleepFor(absl::Milliseconds(2));
    }
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_, device_;
  void* scratch_ = nullptr;
  absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ = false;
  absl::Status abort_reason_;
  uint64_t seq_ = 0;
  std::thread watchdog_;
  std::thread abort_thread_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Backend>> NcclBackend::Create(const BackendContext& ctx) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat("nccl: no CUDA device: ",
                                               e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0"));
  }
  int device = ctx.rank % count;
  cudaSetDevice(device);
  ncclUniqueId id;
  if (ctx.rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return NcclError("ncclGetUniqueId", r);
    LOOM_RETURN_IF_ERROR(ctx.store->Set("nccl/uid", absl::string_view(reinterpret_cast<char*>(&id), sizeof(id))));
  } else {
    LOOM_ASSIGN_OR_RETURN(std::string v, ctx.store->WaitGet("nccl/uid", ctx.timeout));
    if (v.size() != sizeof(id)) return absl::InternalError("nccl: malformed unique id in the store");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclComm_t comm;
  if (ncclResult_t r = ncclCommInitRank(&comm, ctx.size, id, ctx.rank); r != ncclSuccess) {
    return NcclError("ncclCommInitRank", r);
  }
  cudaStream_t stream;
  if (e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommDestroy(comm);
    return CudaError("cudaStreamCreate", e);
  }
  return std::shared_ptr<Backend>(std::make_shared<NcclBackendImpl>(comm, stream, ctx.rank, ctx.size, device));
}

namespace {
const bool kRegistered = RegisterBackend("nccl", NcclBackend::Create);
}  // namespace

}  // namespace loom::collectives::nccl
