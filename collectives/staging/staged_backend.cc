#include "collectives/staging/staged_backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/algorithm_backend.h"
#include "collectives/algorithms/reduce.h"
#include "collectives/staging/overlap_hooks.h"

namespace loom::collectives::staging {
namespace {

Tensor HostSlice(char* p, size_t bytes, DType dtype) {
  return Tensor::Wrap(p, {static_cast<int64_t>(bytes / DTypeSize(dtype))}, dtype, Device::CPU());
}

char* Bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

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
                             StagingOptions options, std::unique_ptr<LocalGroup> local)
    : name_(std::move(name)),
      inner_(std::move(inner)),
      copier_(std::move(copier)),
      options_(std::move(options)),
      local_(std::move(local)),
      executor_(ExecutorOptions(name_, inner_->rank(), options_.flight_recorder_dir)) {}

StagedBackend::~StagedBackend() { executor_.Stop(); }

bool StagedBackend::Supports(OpType op, DType dtype, DeviceKind device) const {
  if (device != DeviceKind::kCUDA) return false;
  // The flat forms run as the inner backend's list forms.
  if (op == OpType::kAllGatherInto) op = OpType::kAllGather;
  if (op == OpType::kReduceScatterFrom) op = OpType::kReduceScatter;
  return inner_->Supports(op, dtype, DeviceKind::kCPU);
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

absl::Status StagedBackend::CheckList(absl::Span<const Tensor> list, const Tensor& like, absl::string_view op,
                                      absl::string_view arg, absl::string_view like_arg) const {
  if (static_cast<int>(list.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": expected ", size(), " tensors, got ",
                                                   list.size()));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = absl::StrCat(arg, "[", i, "]");
    LOOM_RETURN_IF_ERROR(CheckDevice(list[i], op, name));
    if (list[i].dtype() != like.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, ": dtype ", DTypeName(list[i].dtype()), " != ",
                                                     like_arg, " ", DTypeName(like.dtype())));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- executor

absl::StatusOr<WorkPtr> StagedBackend::Enqueue(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                               size_t host_bytes, Plan plan) {
  return EnqueueBody(op, dtype, numel, timeout, host_bytes,
                     [this, host_bytes, plan = std::move(plan)](absl::Time deadline, const std::atomic<bool>&) {
                       return RunTask(host_bytes, plan, deadline);
                     });
}

absl::StatusOr<WorkPtr> StagedBackend::EnqueueBody(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                                   size_t bytes, Body body) {
  auto aborted = std::make_shared<std::atomic<bool>>(false);
  auto abort_hook = [weak = weak_from_this(), aborted] {
    aborted->store(true);
    std::shared_ptr<StagedBackend> self = weak.lock();
    if (!self) return;
    std::vector<WorkPtr> running;
    {
      absl::MutexLock l(&self->mu_);
      running = self->in_flight_;
    }
    for (const WorkPtr& w : running) w->Abort();
  };
  auto run = [this, aborted, body = std::move(body)](uint64_t, absl::Time deadline) {
    absl::Status s = body(deadline, *aborted);
    absl::MutexLock l(&mu_);
    in_flight_.clear();
    return s;
  };
  auto work = executor_.Submit({op, dtype, numel, static_cast<int64_t>(bytes), timeout}, std::move(abort_hook),
                               std::move(run));
  if (absl::IsFailedPrecondition(work.status())) return Annotate(work.status(), name_);
  return work;
}

absl::Status StagedBackend::RunTask(size_t host_bytes, const Plan& plan, absl::Time deadline) {
  const absl::Time start = absl::Now();
  char* host = nullptr;
  if (host_bytes > 0) {
    LOOM_ASSIGN_OR_RETURN(void* h, copier_->HostBuffer(host_bytes));
    host = static_cast<char*>(h);
  }
  std::vector<Bucket> buckets = plan(host);
  absl::Status s = Pipeline(buckets, deadline);
  absl::MutexLock l(&mu_);
  ++stats_.ops;
  stats_.run += absl::Now() - start;
  return s;
}

StagingStats StagedBackend::Stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

absl::Status StagedBackend::Timed(absl::Duration StagingStats::*field, absl::Status s, absl::Time since) {
  const absl::Duration d = absl::Now() - since;
  absl::MutexLock l(&mu_);
  stats_.*field += d;
  return s;
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
  // Each wait, and each inner op's issue, is added to its StagingStats field.
  auto wait_host = [&] {
    const absl::Time t = absl::Now();
    return Timed(&StagingStats::to_host_wait, WaitAll(loading, deadline), t);
  };
  auto issue = [&](size_t i) -> absl::Status {
    const absl::Time t = absl::Now();
    absl::StatusOr<WorkPtr> w = Issue(buckets[i], deadline);
    if (w.ok()) works[i] = *std::move(w);
    return Timed(&StagingStats::inner, w.status(), t);
  };
  // settle runs also when the inner op failed: no copy it issued may
  // outlive the op.
  auto finish = [&](size_t i) -> absl::Status {
    absl::Time t = absl::Now();
    absl::Status s = Timed(&StagingStats::inner, works[i]->Wait(deadline), t);
    if (!buckets[i].settle) return s;
    t = absl::Now();
    absl::Status settled = Timed(&StagingStats::to_device_wait, buckets[i].settle(deadline), t);
    return s.ok() ? settled : s;
  };
  if (n > 0) LOOM_RETURN_IF_ERROR(to_host(0, &loading));
  for (size_t i = 0; i < n; ++i) {
    LOOM_RETURN_IF_ERROR(Annotate(wait_host(), absl::StrCat("bucket ", i, ": copy to host")));
    LOOM_RETURN_IF_ERROR(issue(i));
    if (i + 1 < n) LOOM_RETURN_IF_ERROR(to_host(i + 1, &loading));
    if (i > 0) {
      LOOM_RETURN_IF_ERROR(Annotate(finish(i - 1), absl::StrCat("bucket ", i - 1)));
      LOOM_RETURN_IF_ERROR(to_device(i - 1, &storing));
    }
  }
  if (n > 0) {
    LOOM_RETURN_IF_ERROR(Annotate(finish(n - 1), absl::StrCat("bucket ", n - 1)));
    LOOM_RETURN_IF_ERROR(to_device(n - 1, &storing));
  }
  const absl::Time t = absl::Now();
  return Annotate(Timed(&StagingStats::to_device_wait, WaitAll(storing, deadline), t), "copy to device");
}

// ---------------------------------------------------------------- segments

absl::StatusOr<WorkPtr> StagedBackend::Stage(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                             std::vector<Segment> segments, Bucketing bucketing, BucketOp run) {
  if (!Supports(op, dtype, DeviceKind::kCUDA)) {
    return absl::UnimplementedError(absl::StrCat(OpTypeName(op), ": backend ", name_, " (inner ", inner_->name(),
                                                 ") does not support dtype ", DTypeName(dtype)));
  }
  size_t host_bytes = 0, longest = 0;
  for (const Segment& s : segments) {
    host_bytes += s.bytes;
    longest = std::max(longest, s.bytes);
  }
  const bool one = bucketing == Bucketing::kOne;
  const size_t step = one ? std::max<size_t>(longest, 1) : BucketBytes(dtype);
  const size_t count = one ? 1 : (longest + step - 1) / step;
  Plan plan = [segments = std::move(segments), run = std::move(run), step, count, dtype](char* host) {
    std::vector<Bucket> out(count);
    for (size_t j = 0; j < count; ++j) {
      const size_t off = j * step;
      std::vector<Tensor> slices;
      char* base = host;
      for (const Segment& s : segments) {
        const size_t len = s.bytes > off ? std::min(step, s.bytes - off) : 0;
        char* h = base + std::min(off, s.bytes);
        if (len > 0 && s.to_host) out[j].to_host.push_back({h, s.dev + off, len});
        if (len > 0 && s.to_device) out[j].to_device.push_back({s.dev + off, h, len});
        slices.push_back(HostSlice(h, len, dtype));
        base += s.bytes;
      }
      out[j].run = [run, slices = std::move(slices)](absl::Duration left) { return run(slices, left); };
    }
    return out;
  };
  return Enqueue(op, dtype, numel, timeout, host_bytes, std::move(plan));
}

// Segments: [input, outputs[0..n)]; bucket j gathers slice j of every rank's block.
absl::StatusOr<WorkPtr> StagedBackend::StageAllGather(OpType op, const Tensor& input, std::vector<Segment> segments,
                                                      absl::Duration timeout) {
  if (local_ != nullptr) {
    const DType dtype = input.dtype();
    const size_t es = DTypeSize(dtype);
    const char* in = segments[0].dev;
    std::vector<char*> outs;
    std::vector<size_t> counts;
    for (size_t i = 1; i < segments.size(); ++i) {
      outs.push_back(segments[i].dev);
      counts.push_back(segments[i].bytes / es);
    }
    return LocalOp(op, dtype, input.numel(), timeout, input.nbytes(),
                   [this, outs, counts, in, dtype](absl::Time deadline, const std::atomic<bool>& aborted,
                                                   LocalStats* ls) {
                     return local_->AllGather(outs, counts, in, dtype, deadline, aborted, ls);
                   });
  }
  Backend* inner = inner_.get();
  return Stage(op, input.dtype(), input.numel(), timeout, std::move(segments), Bucketing::kBuckets,
               [inner](absl::Span<const Tensor> h, absl::Duration left) {
                 AllGatherOptions io;
                 io.timeout = left;
                 return inner->AllGather(h.subspan(1), h[0], io);
               });
}

// Segments: [inputs[0..n), output]; bucket j reduces slice j of every block.
absl::StatusOr<WorkPtr> StagedBackend::StageReduceScatter(OpType op, const Tensor& output,
                                                          std::vector<Segment> segments,
                                                          const ReduceScatterOptions& o) {
  const ReduceOp rop = o.op;
  if (local_ != nullptr) {
    const DType dtype = output.dtype();
    const size_t es = DTypeSize(dtype);
    char* out = segments.back().dev;
    std::vector<const char*> ins;
    std::vector<size_t> counts;
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
      ins.push_back(segments[i].dev);
      counts.push_back(segments[i].bytes / es);
    }
    return LocalOp(op, dtype, output.numel(), o.timeout, output.nbytes(),
                   [this, out, ins, counts, dtype, rop](absl::Time deadline, const std::atomic<bool>& aborted,
                                                        LocalStats* ls) {
                     return local_->ReduceScatter(out, ins, counts, dtype, rop, deadline, aborted, ls);
                   });
  }
  Backend* inner = inner_.get();
  return Stage(op, output.dtype(), output.numel(), o.timeout, std::move(segments), Bucketing::kBuckets,
               [inner, rop](absl::Span<const Tensor> h, absl::Duration left) {
                 ReduceScatterOptions io;
                 io.op = rop;
                 io.timeout = left;
                 return inner->ReduceScatter(h.back(), h.first(h.size() - 1), io);
               });
}

// ---------------------------------------------------------------- ops

absl::StatusOr<WorkPtr> StagedBackend::AllReduce(const Tensor& t, const AllReduceOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "all_reduce", "tensor"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(t.dtype(), o.op), "all_reduce"));
  if (o.stage) return absl::InvalidArgumentError("all_reduce: options.stage is set by a staging backend only");
  Backend* inner = inner_.get();
  const ReduceOp op = o.op;
  if (local_ != nullptr) return LocalAllReduce(t, op, o.timeout);
  if (inner->TakesStageHooks()) return OverlappedAllReduce(t, op, o.timeout);
  return Stage(OpType::kAllReduce, t.dtype(), t.numel(), o.timeout, {{Bytes(t), t.nbytes(), true, true}},
               Bucketing::kBuckets, [inner, op](absl::Span<const Tensor> h, absl::Duration left) {
                 AllReduceOptions io;
                 io.op = op;
                 io.timeout = left;
                 return inner->AllReduce(h[0], io);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::LocalAllReduce(const Tensor& t, ReduceOp op, absl::Duration timeout) {
  char* dev = Bytes(t);
  const size_t bytes = t.nbytes();
  const DType dtype = t.dtype();
  return LocalOp(OpType::kAllReduce, dtype, t.numel(), timeout, bytes,
                 [this, dev, bytes, dtype, op](absl::Time deadline, const std::atomic<bool>& aborted,
                                              LocalStats* ls) {
                   return local_->AllReduce(dev, bytes, dtype, op, deadline, aborted, ls);
                 });
}

absl::StatusOr<WorkPtr> StagedBackend::LocalOp(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                               size_t bytes, LocalBody body) {
  return EnqueueBody(op, dtype, numel, timeout, bytes,
                     [this, body = std::move(body)](absl::Time deadline, const std::atomic<bool>& aborted) {
                       const absl::Time start = absl::Now();
                       LocalStats ls;
                       absl::Status s = body(deadline, aborted, &ls);
                       absl::MutexLock l(&mu_);
                       ++stats_.ops;
                       stats_.run += absl::Now() - start;
                       stats_.to_host_wait += ls.to_host_wait;
                       stats_.to_device_wait += ls.to_device_wait;
                       stats_.inner += ls.peer_wait + ls.reduce;
                       stats_.peer_wait += ls.peer_wait;
                       return s;
                     });
}

absl::StatusOr<WorkPtr> StagedBackend::OverlappedAllReduce(const Tensor& t, ReduceOp op, absl::Duration timeout) {
  Backend* inner = inner_.get();
  Copier* copier = copier_.get();
  char* dev = Bytes(t);
  const size_t bytes = t.nbytes();
  const DType dtype = t.dtype();
  const size_t piece = options_.piece_bytes;
  Plan plan = [this, inner, copier, dev, bytes, dtype, op, piece](char* host) {
    auto hooks = std::make_shared<OverlapHooks>(copier, dev, host);
    std::vector<Bucket> out(1);
    out[0].run = [inner, hooks, host, bytes, dtype, op, piece](absl::Duration left) {
      AllReduceOptions io;
      io.op = op;
      io.timeout = left;
      io.stage = hooks->Hooks(absl::Now() + left, piece);
      return inner->AllReduce(HostSlice(host, bytes, dtype), io);
    };
    out[0].settle = [this, hooks](absl::Time deadline) {
      absl::Status s = hooks->Finish(deadline);
      const absl::Duration waited = hooks->ready_wait();
      absl::MutexLock l(&mu_);
      stats_.algorithm_host_wait += waited;
      return s;
    };
    return out;
  };
  return Enqueue(OpType::kAllReduce, dtype, t.numel(), timeout, bytes, std::move(plan));
}

absl::StatusOr<WorkPtr> StagedBackend::Broadcast(const Tensor& t, const BroadcastOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "broadcast", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "broadcast", "options.root"));
  Backend* inner = inner_.get();
  const int root = o.root;
  const bool is_root = rank() == root;
  return Stage(OpType::kBroadcast, t.dtype(), t.numel(), o.timeout, {{Bytes(t), t.nbytes(), is_root, !is_root}},
               Bucketing::kBuckets, [inner, root](absl::Span<const Tensor> h, absl::Duration left) {
                 BroadcastOptions io;
                 io.root = root;
                 io.timeout = left;
                 return inner->Broadcast(h[0], io);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::Reduce(const Tensor& t, const ReduceOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "reduce", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "reduce", "options.root"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(t.dtype(), o.op), "reduce"));
  Backend* inner = inner_.get();
  const int root = o.root;
  const ReduceOp op = o.op;
  return Stage(OpType::kReduce, t.dtype(), t.numel(), o.timeout, {{Bytes(t), t.nbytes(), true, rank() == root}},
               Bucketing::kBuckets, [inner, root, op](absl::Span<const Tensor> h, absl::Duration left) {
                 ReduceOptions io;
                 io.root = root;
                 io.op = op;
                 io.timeout = left;
                 return inner->Reduce(h[0], io);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::AllGather(absl::Span<const Tensor> outputs, const Tensor& input,
                                                 const AllGatherOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(input, "all_gather", "input"));
  LOOM_RETURN_IF_ERROR(CheckList(outputs, input, "all_gather", "outputs", "input"));
  if (outputs[rank()].numel() != input.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather: outputs[", rank(), "] has ", outputs[rank()].numel(),
                                                   " elements, input ", input.numel()));
  }
  std::vector<Segment> segs{{Bytes(input), input.nbytes(), true, false}};
  for (const Tensor& t : outputs) segs.push_back({Bytes(t), t.nbytes(), false, true});
  return StageAllGather(OpType::kAllGather, input, std::move(segs), o.timeout);
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
  const size_t block = input.nbytes();
  std::vector<Segment> segs{{Bytes(input), block, true, false}};
  for (int r = 0; r < n; ++r) segs.push_back({Bytes(output) + r * block, block, false, true});
  return StageAllGather(OpType::kAllGatherInto, input, std::move(segs), o.timeout);
}

absl::StatusOr<WorkPtr> StagedBackend::ReduceScatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                                     const ReduceScatterOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(output, "reduce_scatter", "output"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(output.dtype(), o.op), "reduce_scatter"));
  LOOM_RETURN_IF_ERROR(CheckList(inputs, output, "reduce_scatter", "inputs", "output"));
  if (inputs[rank()].numel() != output.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: output: expected ", inputs[rank()].numel(),
                                                   " elements (inputs[", rank(), "]), got ", output.numel()));
  }
  std::vector<Segment> segs;
  for (const Tensor& t : inputs) segs.push_back({Bytes(t), t.nbytes(), true, false});
  segs.push_back({Bytes(output), output.nbytes(), false, true});
  return StageReduceScatter(OpType::kReduceScatter, output, std::move(segs), o);
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
  const size_t block = output.nbytes();
  std::vector<Segment> segs;
  for (int r = 0; r < n; ++r) segs.push_back({Bytes(input) + r * block, block, true, false});
  segs.push_back({Bytes(output), block, false, true});
  return StageReduceScatter(OpType::kReduceScatterFrom, output, std::move(segs), o);
}

absl::StatusOr<WorkPtr> StagedBackend::AllToAll(const Tensor& output, const Tensor& input, const AllToAllOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(output, "all_to_all", "output"));
  LOOM_RETURN_IF_ERROR(CheckDevice(input, "all_to_all", "input"));
  if (output.dtype() != input.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all: output: dtype ", DTypeName(output.dtype()),
                                                   " != input ", DTypeName(input.dtype())));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<size_t> send, AllToAllSplitBytes(input, o.input_split_sizes, size(), "input"));
  LOOM_ASSIGN_OR_RETURN(std::vector<size_t> recv,
                        AllToAllSplitBytes(output, o.output_split_sizes, size(), "output"));
  // The host copies are 1-D: their splits count elements.
  AllToAllOptions io;
  const size_t es = DTypeSize(input.dtype());
  for (size_t b : send) io.input_split_sizes.push_back(static_cast<int64_t>(b / es));
  for (size_t b : recv) io.output_split_sizes.push_back(static_cast<int64_t>(b / es));
  Backend* inner = inner_.get();
  return Stage(OpType::kAllToAll, input.dtype(), input.numel(), o.timeout,
               {{Bytes(input), input.nbytes(), true, false}, {Bytes(output), output.nbytes(), false, true}},
               Bucketing::kOne, [inner, io](absl::Span<const Tensor> h, absl::Duration left) {
                 AllToAllOptions x = io;
                 x.timeout = left;
                 return inner->AllToAll(h[1], h[0], x);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::Gather(absl::Span<const Tensor> outputs, const Tensor& input,
                                              const GatherOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(input, "gather", "input"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "gather", "options.root"));
  std::vector<Segment> segs{{Bytes(input), input.nbytes(), true, false}};
  if (rank() == o.root) {
    LOOM_RETURN_IF_ERROR(CheckList(outputs, input, "gather", "outputs", "input"));
    if (outputs[rank()].numel() != input.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("gather: outputs[", rank(), "] has ", outputs[rank()].numel(),
                                                     " elements, input ", input.numel()));
    }
    for (const Tensor& t : outputs) segs.push_back({Bytes(t), t.nbytes(), false, true});
  }
  Backend* inner = inner_.get();
  const int root = o.root;
  return Stage(OpType::kGather, input.dtype(), input.numel(), o.timeout, std::move(segs), Bucketing::kOne,
               [inner, root](absl::Span<const Tensor> h, absl::Duration left) {
                 GatherOptions io;
                 io.root = root;
                 io.timeout = left;
                 return inner->Gather(h.subspan(1), h[0], io);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::Scatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                               const ScatterOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(output, "scatter", "output"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "scatter", "options.root"));
  std::vector<Segment> segs;
  if (rank() == o.root) {
    LOOM_RETURN_IF_ERROR(CheckList(inputs, output, "scatter", "inputs", "output"));
    if (inputs[rank()].numel() != output.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("scatter: inputs[", rank(), "] has ", inputs[rank()].numel(),
                                                     " elements, output ", output.numel()));
    }
    for (const Tensor& t : inputs) segs.push_back({Bytes(t), t.nbytes(), true, false});
  }
  segs.push_back({Bytes(output), output.nbytes(), false, true});
  Backend* inner = inner_.get();
  const int root = o.root;
  return Stage(OpType::kScatter, output.dtype(), output.numel(), o.timeout, std::move(segs), Bucketing::kOne,
               [inner, root](absl::Span<const Tensor> h, absl::Duration left) {
                 ScatterOptions io;
                 io.root = root;
                 io.timeout = left;
                 return inner->Scatter(h.back(), h.first(h.size() - 1), io);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::Send(const Tensor& t, int dst, const SendRecvOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "send", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(dst, size(), "send", "dst"));
  if (dst == rank()) return absl::InvalidArgumentError("send: dst: cannot send to self");
  Backend* inner = inner_.get();
  const uint32_t tag = o.tag;
  return Stage(OpType::kSend, t.dtype(), t.numel(), o.timeout, {{Bytes(t), t.nbytes(), true, false}},
               Bucketing::kBuckets, [inner, dst, tag](absl::Span<const Tensor> h, absl::Duration left) {
                 SendRecvOptions io;
                 io.tag = tag;
                 io.timeout = left;
                 return inner->Send(h[0], dst, io);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::Recv(const Tensor& t, int src, const SendRecvOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckDevice(t, "recv", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(src, size(), "recv", "src"));
  if (src == rank()) return absl::InvalidArgumentError("recv: src: cannot receive from self");
  Backend* inner = inner_.get();
  const uint32_t tag = o.tag;
  return Stage(OpType::kRecv, t.dtype(), t.numel(), o.timeout, {{Bytes(t), t.nbytes(), false, true}},
               Bucketing::kBuckets, [inner, src, tag](absl::Span<const Tensor> h, absl::Duration left) {
                 SendRecvOptions io;
                 io.tag = tag;
                 io.timeout = left;
                 return inner->Recv(h[0], src, io);
               });
}

absl::StatusOr<WorkPtr> StagedBackend::Barrier(const BarrierOptions& o) {
  Backend* inner = inner_.get();
  return Stage(OpType::kBarrier, DType::kBool, 0, o.timeout, {}, Bucketing::kOne,
               [inner](absl::Span<const Tensor>, absl::Duration left) {
                 BarrierOptions io;
                 io.timeout = left;
                 return inner->Barrier(io);
               });
}

}  // namespace loom::collectives::staging
