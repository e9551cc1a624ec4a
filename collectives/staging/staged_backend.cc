#include "collectives/staging/staged_backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/algorithm_backend.h"
#include "collectives/algorithms/reduce.h"

namespace loom::collectives::staging {
namespace {

Tensor HostSlice(char* p, size_t bytes, DType dtype) {
  return Tensor::Wrap(p, {static_cast<int64_t>(bytes / DTypeSize(dtype))}, dtype, Device::CPU());
}

absl::Status Unsupported(absl::string_view name, OpType op) {
  return absl::UnimplementedError(absl::StrCat(name, ": ", OpTypeName(op),
                                               " is not staged (supported: all_reduce, broadcast, reduce, "
                                               "all_gather_into, reduce_scatter_from, barrier)"));
}

absl::Status WaitAll(std::vector<std::unique_ptr<CopyEvent>>& events, absl::Time deadline) {
  for (auto& e : events) LOOM_RETURN_IF_ERROR(e->Wait(deadline));
  events.clear();
  return absl::OkStatus();
}

absl::Duration Left(absl::Time deadline) {
  return std::max(deadline - absl::Now(), absl::Milliseconds(1));
}

// A failed op is recorded with zero latency, and an op not run because an
// earlier one failed counts as a failure; the backend has nothing to abort
// (the inner backend fails on its own).
internal::OpExecutorOptions ExecutorOptions(std::string name, int rank, std::string flight_recorder_dir) {
  internal::OpExecutorOptions o;
  o.backend = std::move(name);
  o.rank = rank;
  o.flight_recorder_dir = std::move(flight_recorder_dir);
  o.count_ops_not_run = true;
  o.failure_latency = false;
  return o;
}

}  // namespace

StagedBackend::StagedBackend(std::string name, std::shared_ptr<Backend> inner, std::unique_ptr<Copier> copier,
                             StagingOptions options)
    : name_(std::move(name)),
      inner_(std::move(inner)),
      copier_(std::move(copier)),
      options_(std::move(options)),
      executor_(ExecutorOptions(name_, inner_->rank(), options_.flight_recorder_dir)) {}

StagedBackend::~StagedBackend() { executor_.Stop(); }

bool StagedBackend::Supports(OpType op, DType dtype, DeviceKind device) const {
  if (device != DeviceKind::kCUDA) return false;
  switch (op) {
    case OpType::kAllReduce:
    case OpType::kBroadcast:
    case OpType::kReduce:
    case OpType::kBarrier:
      return inner_->Supports(op, dtype, DeviceKind::kCPU);
    case OpType::kAllGatherInto:
      return inner_->Supports(OpType::kAllGather, dtype, DeviceKind::kCPU);
    case OpType::kReduceScatterFrom:
      return inner_->Supports(OpType::kReduceScatter, dtype, DeviceKind::kCPU);
    default:
      return false;
  }
}

size_t StagedBackend::BucketBytes(DType dtype) const {
  size_t es = DTypeSize(dtype);
  return std::max(es, options_.bucket_bytes / es * es);
}

absl::Status StagedBackend::CheckDevice(const Tensor& t, absl::string_view op, absl::string_view arg) const {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(t, op, arg));
  if (!t.device().is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": ", name_, " stages CUDA tensors, got ",
                                                   t.device().ToString()));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- executor

absl::StatusOr<WorkPtr> StagedBackend::Enqueue(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                               size_t host_bytes, Plan plan) {
  auto abort_hook = [weak = weak_from_this()] {
    std::shared_ptr<StagedBackend> self = weak.lock();
    if (!self) return;
    std::vector<WorkPtr> running;
    {
      absl::MutexLock l(&self->mu_);
      running = self->in_flight_;
    }
    for (const WorkPtr& w : running) w->Abort();
  };
  auto run = [this, host_bytes, plan = std::move(plan)](uint64_t, absl::Time deadline) {
    absl::Status s = RunTask(host_bytes, plan, deadline);
    absl::MutexLock l(&mu_);
    in_flight_.clear();
    return s;
  };
  auto work = executor_.Submit({op, dtype, numel, static_cast<int64_t>(host_bytes), timeout}, std::move(abort_hook),
                               std::move(run));
  if (absl::IsFailedPrecondition(work.status())) return Annotate(work.status(), name_);
  return work;
}

absl::Status StagedBackend::RunTask(size_t host_bytes, const Plan& plan, absl::Time deadline) {
  char* host = nullptr;
  if (host_bytes > 0) {
    LOOM_ASSIGN_OR_RETURN(void* h, copier_->HostBuffer(host_bytes));
    host = static_cast<char*>(h);
  }
  std::vector<Bucket> buckets = plan(host);
  return Pipeline(buckets, deadline);
}

absl::StatusOr<WorkPtr> StagedBackend::Issue(Bucket& b, absl::Time deadline) {
  LOOM_ASSIGN_OR_RETURN(WorkPtr w, b.run(Left(deadline)));
  absl::MutexLock l(&mu_);
  in_flight_.push_back(w);
  return w;
}

absl::Status StagedBackend::Pipeline(std::vector<Bucket>& buckets, absl::Time deadline) {
  const size_t n = buckets.size();
  auto to_host = [&](size_t i, std::vector<std::unique_ptr<CopyEvent>>* ev) -> absl::Status {
    for (const Copy& c : buckets[i].to_host) {
      LOOM_ASSIGN_OR_RETURN(auto e, copier_->ToHost(c.dst, c.src, c.bytes));
      ev->push_back(std::move(e));
    }
    return absl::OkStatus();
  };
  auto to_device = [&](size_t i, std::vector<std::unique_ptr<CopyEvent>>* ev) -> absl::Status {
    for (const Copy& c : buckets[i].to_device) {
      LOOM_ASSIGN_OR_RETURN(auto e, copier_->ToDevice(c.dst, c.src, c.bytes));
      ev->push_back(std::move(e));
    }
    return absl::OkStatus();
  };
  std::vector<std::unique_ptr<CopyEvent>> loading, storing;
  std::vector<WorkPtr> works(n);
  if (n > 0) LOOM_RETURN_IF_ERROR(to_host(0, &loading));
  for (size_t i = 0; i < n; ++i) {
    LOOM_RETURN_IF_ERROR(Annotate(WaitAll(loading, deadline), absl::StrCat("bucket ", i, ": copy to host")));
    LOOM_ASSIGN_OR_RETURN(works[i], Issue(buckets[i], deadline));
    if (i + 1 < n) LOOM_RETURN_IF_ERROR(to_host(i + 1, &loading));
    if (i > 0) {
      LOOM_RETURN_IF_ERROR(Annotate(works[i - 1]->Wait(deadline), absl::StrCat("bucket ", i - 1)));
      LOOM_RETURN_IF_ERROR(to_device(i - 1, &storing));
    }
  }
  if (n > 0) {
    LOOM_RETURN_IF_ERROR(Annotate(works[n - 1]->Wait(deadline), absl::StrCat("bucket ", n - 1)));
    LOOM_RETURN_IF_ERROR(to_device(n - 1, &storing));
  }
  return Annotate(WaitAll(storing, deadline), "copy to device");
}

// ---------------------------------------------------------------- ops

absl::StatusOr<WorkPtr> StagedBackend::AllReduce(const Tensor& t, const AllReduceOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "all_reduce", "tensor"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(t.dtype(), o.op), "all_reduce"));
  const size_t total = t.nbytes(), step = BucketBytes(t.dtype());
  char* dev = static_cast<char*>(t.raw_data());
  Backend* inner = inner_.get();
  ReduceOp op = o.op;
  DType dt = t.dtype();
  return Enqueue(OpType::kAllReduce, dt, t.numel(), o.timeout, total, [=](char* host) {
    std::vector<Bucket> out;
    for (size_t off = 0; off < total; off += step) {
      size_t len = std::min(step, total - off);
      char* h = host + off;
      out.push_back(Bucket{{{h, dev + off, len}},
                           [=](absl::Duration left) {
                             AllReduceOptions io;
                             io.op = op;
                             io.timeout = left;
                             return inner->AllReduce(HostSlice(h, len, dt), io);
                           },
                           {{dev + off, h, len}}});
    }
    return out;
  });
}

absl::StatusOr<WorkPtr> StagedBackend::Broadcast(const Tensor& t, const BroadcastOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "broadcast", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "broadcast", "options.root"));
  const size_t total = t.nbytes(), step = BucketBytes(t.dtype());
  char* dev = static_cast<char*>(t.raw_data());
  Backend* inner = inner_.get();
  const int root = o.root;
  const bool is_root = rank() == root;
  DType dt = t.dtype();
  return Enqueue(OpType::kBroadcast, dt, t.numel(), o.timeout, total, [=](char* host) {
    std::vector<Bucket> out;
    for (size_t off = 0; off < total; off += step) {
      size_t len = std::min(step, total - off);
      char* h = host + off;
      Bucket b;
      if (is_root) b.to_host.push_back({h, dev + off, len});
      else b.to_device.push_back({dev + off, h, len});
      b.run = [=](absl::Duration left) {
        BroadcastOptions io;
        io.root = root;
        io.timeout = left;
        return inner->Broadcast(HostSlice(h, len, dt), io);
      };
      out.push_back(std::move(b));
    }
    return out;
  });
}

absl::StatusOr<WorkPtr> StagedBackend::Reduce(const Tensor& t, const ReduceOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "reduce", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "reduce", "options.root"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(t.dtype(), o.op), "reduce"));
  const size_t total = t.nbytes(), step = BucketBytes(t.dtype());
  char* dev = static_cast<char*>(t.raw_data());
  Backend* inner = inner_.get();
  const int root = o.root;
  const bool is_root = rank() == root;
  ReduceOp op = o.op;
  DType dt = t.dtype();
  return Enqueue(OpType::kReduce, dt, t.numel(), o.timeout, total, [=](char* host) {
    std::vector<Bucket> out;
    for (size_t off = 0; off < total; off += step) {
      size_t len = std::min(step, total - off);
      char* h = host + off;
      Bucket b;
      b.to_host.push_back({h, dev + off, len});
      if (is_root) b.to_device.push_back({dev + off, h, len});
      b.run = [=](absl::Duration left) {
        ReduceOptions io;
        io.root = root;
        io.op = op;
        io.timeout = left;
        return inner->Reduce(HostSlice(h, len, dt), io);
      };
      out.push_back(std::move(b));
    }
    return out;
  });
}

absl::StatusOr<WorkPtr> StagedBackend::AllGatherInto(const Tensor& output, const Tensor& input,
                                                     const AllGatherOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(input, "all_gather_into", "input"));
  LOOM_RETURN_IF_ERROR(CheckDevice(output, "all_gather_into", "output"));
  const int n = size();
  if (output.dtype() != input.dtype() || output.numel() != input.numel() * n) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather_into: output: expected ", DTypeName(input.dtype()),
                                                   " with ", input.numel() * n, " elements, got ",
                                                   output.DebugString()));
  }
  const size_t block = input.nbytes(), step = BucketBytes(input.dtype());
  const char* in = static_cast<const char*>(input.raw_data());
  char* dev_out = static_cast<char*>(output.raw_data());
  Backend* inner = inner_.get();
  DType dt = input.dtype();
  // Host layout: [input block | n output blocks].
  return Enqueue(OpType::kAllGatherInto, dt, input.numel(), o.timeout, block * (n + 1), [=](char* host) {
    std::vector<Bucket> out;
    char* host_out = host + block;
    for (size_t off = 0; off < block; off += step) {
      size_t len = std::min(step, block - off);
      Bucket b;
      b.to_host.push_back({host + off, in + off, len});
      for (int r = 0; r < n; ++r) b.to_device.push_back({dev_out + r * block + off, host_out + r * block + off, len});
      b.run = [=](absl::Duration left) {
        std::vector<Tensor> outs;
        for (int r = 0; r < n; ++r) outs.push_back(HostSlice(host_out + r * block + off, len, dt));
        AllGatherOptions io;
        io.timeout = left;
        return inner->AllGather(outs, HostSlice(host + off, len, dt), io);
      };
      out.push_back(std::move(b));
    }
    return out;
  });
}

absl::StatusOr<WorkPtr> StagedBackend::ReduceScatterFrom(const Tensor& output, const Tensor& input,
                                                         const ReduceScatterOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(output, "reduce_scatter_from", "output"));
  LOOM_RETURN_IF_ERROR(CheckDevice(input, "reduce_scatter_from", "input"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(output.dtype(), o.op), "reduce_scatter_from"));
  const int n = size();
  if (output.dtype() != input.dtype() || input.numel() != output.numel() * n) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter_from: input: expected ",
                                                   DTypeName(output.dtype()), " with ", output.numel() * n,
                                                   " elements, got ", input.DebugString()));
  }
  const size_t block = output.nbytes(), step = BucketBytes(output.dtype());
  const char* in = static_cast<const char*>(input.raw_data());
  char* dev_out = static_cast<char*>(output.raw_data());
  Backend* inner = inner_.get();
  ReduceOp op = o.op;
  DType dt = output.dtype();
  // Host layout: [n input blocks | output block].
  return Enqueue(OpType::kReduceScatterFrom, dt, output.numel(), o.timeout, block * (n + 1), [=](char* host) {
    std::vector<Bucket> out;
    char* host_out = host + n * block;
    for (size_t off = 0; off < block; off += step) {
      size_t len = std::min(step, block - off);
      Bucket b;
      for (int r = 0; r < n; ++r) b.to_host.push_back({host + r * block + off, in + r * block + off, len});
      b.to_device.push_back({dev_out + off, host_out + off, len});
      b.run = [=](absl::Duration left) {
        std::vector<Tensor> ins;
        for (int r = 0; r < n; ++r) ins.push_back(HostSlice(host + r * block + off, len, dt));
        ReduceScatterOptions io;
        io.op = op;
        io.timeout = left;
        return inner->ReduceScatter(HostSlice(host_out + off, len, dt), ins, io);
      };
      out.push_back(std::move(b));
    }
    return out;
  });
}

absl::StatusOr<WorkPtr> StagedBackend::Barrier(const BarrierOptions& o) {
  Backend* inner = inner_.get();
  return Enqueue(OpType::kBarrier, DType::kBool, 0, o.timeout, 0, [inner](char*) {
    std::vector<Bucket> out(1);
    out[0].run = [inner](absl::Duration left) {
      BarrierOptions io;
      io.timeout = left;
      return inner->Barrier(io);
    };
    return out;
  });
}

absl::StatusOr<WorkPtr> StagedBackend::AllGather(absl::Span<const Tensor>, const Tensor&, const AllGatherOptions&) {
  return Unsupported(name_, OpType::kAllGather);
}
absl::StatusOr<WorkPtr> StagedBackend::ReduceScatter(const Tensor&, absl::Span<const Tensor>,
                                                     const ReduceScatterOptions&) {
  return Unsupported(name_, OpType::kReduceScatter);
}
absl::StatusOr<WorkPtr> StagedBackend::AllToAll(const Tensor&, const Tensor&, const AllToAllOptions&) {
  return Unsupported(name_, OpType::kAllToAll);
}
absl::StatusOr<WorkPtr> StagedBackend::Gather(absl::Span<const Tensor>, const Tensor&, const GatherOptions&) {
  return Unsupported(name_, OpType::kGather);
}
absl::StatusOr<WorkPtr> StagedBackend::Scatter(const Tensor&, absl::Span<const Tensor>, const ScatterOptions&) {
  return Unsupported(name_, OpType::kScatter);
}
absl::StatusOr<WorkPtr> StagedBackend::Send(const Tensor&, int, const SendRecvOptions&) {
  return Unsupported(name_, OpType::kSend);
}
absl::StatusOr<WorkPtr> StagedBackend::Recv(const Tensor&, int, const SendRecvOptions&) {
  return Unsupported(name_, OpType::kRecv);
}

}  // namespace loom::collectives::staging
