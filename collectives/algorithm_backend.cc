#include "collectives/algorithm_backend.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/algorithms/reduce.h"

namespace loom::collectives {
namespace {

std::vector<char> Staging(size_t bytes) { return std::vector<char>(bytes); }

}  // namespace

absl::Status CheckTensorArg(const Tensor& t, absl::string_view op, absl::string_view arg) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": undefined tensor"));
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": must be contiguous, got ",
                                                   t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckRank(int r, int size, absl::string_view op, absl::string_view arg) {
  if (r < 0 || r >= size) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", arg, ": rank ", r,
                                                   " out of range for group size ", size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<size_t>> AllToAllSplitBytes(const Tensor& t, absl::Span<const int64_t> given, int n,
                                                       absl::string_view arg) {
  int64_t rows = t.ndim() == 0 ? 1 : t.dim(0);
  size_t row_bytes = rows == 0 ? 0 : t.nbytes() / rows;
  std::vector<int64_t> s(given.begin(), given.end());
  if (s.empty()) {
    if (rows % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat("all_to_all: ", arg, ": ", rows,
                                                     " rows do not split evenly over ", n, " ranks"));
    }
    s.assign(n, rows / n);
  }
  if (static_cast<int>(s.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all: options.", arg, "_split_sizes: expected ", n,
                                                   " entries, got ", s.size()));
  }
  int64_t sum = 0;
  for (int64_t v : s) {
    if (v < 0) return absl::InvalidArgumentError(absl::StrCat("all_to_all: options.", arg, "_split_sizes: negative entry"));
    sum += v;
  }
  if (sum != rows) {
    return absl::InvalidArgumentError(absl::StrCat("all_to_all: options.", arg, "_split_sizes: sum ", sum, " != ",
                                                   rows, " rows of ", arg));
  }
  std::vector<size_t> bytes;
  for (int64_t v : s) bytes.push_back(static_cast<size_t>(v) * row_bytes);
  return bytes;
}

AlgorithmBackend::AlgorithmBackend(std::string name, std::unique_ptr<transport::Transport> transport)
    : name_(std::move(name)),
      transport_(std::move(transport)),
      executor_(ExecutorOptions()) {}

internal::OpExecutorOptions AlgorithmBackend::ExecutorOptions() {
  internal::OpExecutorOptions o;
  o.backend = name_;
  o.rank = transport_->rank();
  o.describe_failure = [this](const absl::Status& e) { return DescribeFailure(e); };
  o.abort = [this](const absl::Status& e) { AbortTransports(e); };
  return o;
}

AlgorithmBackend::~AlgorithmBackend() { StopExecutor(); }

void AlgorithmBackend::StopExecutor() { executor_.Stop(); }

bool AlgorithmBackend::Supports(OpType, DType, DeviceKind device) const {
  return device == DeviceKind::kCPU;
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Enqueue(OpType op, DType dtype, int64_t numel, absl::Duration timeout,
                                                  std::function<absl::Status(const algorithms::Comm&)> fn, PostFn post,
                                                  Tensor keep_alive) {
  transport::Transport* t = transport_.get();
  ChannelPool* pool = channels_.get();
  std::string what = absl::StrCat(name_, " ", OpTypeName(op));
  auto abort_hook = [t, pool, what] {
    absl::Status reason = absl::CancelledError(absl::StrCat(what, ": aborted by the user"));
    if (pool) pool->AbortExtra(reason);
    t->Abort(reason);
  };
  internal::OpExecutor::RunFn run;
  internal::OpExecutor::PostFn posted;
  if (post) {
    posted = [t, post = std::move(post), keep_alive = std::move(keep_alive)](
                 uint64_t tag_seq, absl::Time deadline) -> absl::StatusOr<internal::OpExecutor::Completion> {
      auto req = post(Comm{t, algorithms::CollectiveTagBase(tag_seq), deadline});
      if (!req.ok()) return req.status();
      std::shared_ptr<transport::TransportRequest> r(std::move(*req));
      return internal::OpExecutor::Completion([r](absl::Time d) { return r->Wait(d); });
    };
  } else {
    run = [t, fn = std::move(fn)](uint64_t tag_seq, absl::Time deadline) {
      return fn(Comm{t, algorithms::CollectiveTagBase(tag_seq), deadline});
    };
  }
  const int64_t bytes = numel * static_cast<int64_t>(DTypeSize(dtype));
  auto work = executor_.Submit({op, dtype, numel, bytes, timeout}, std::move(abort_hook), std::move(run),
                               std::move(posted));
  if (absl::IsFailedPrecondition(work.status())) return Annotate(work.status(), what);
  return work;
}

absl::Status AlgorithmBackend::DescribeFailure(const absl::Status& e) {
  if (!store_ || size() <= 1) return e;
  std::string mine = absl::StrCat("error/", rank());
  (void)store_->Set(mine, e.message());
  std::string others;
  if (auto keys = store_->List("error/"); keys.ok()) {
    for (const std::string& k : *keys) {
      if (k == mine) continue;
      if (auto v = store_->Get(k); v.ok()) absl::StrAppend(&others, "; earlier: ", *v);
    }
  }
  if (others.empty()) return e;
  return absl::Status(e.code(), absl::StrCat(e.message(), others));
}

void AlgorithmBackend::AbortTransports(const absl::Status& e) {
  // Peers are out of step: stop every transport thread before buffers go away.
  if (channels_) channels_->AbortExtra(e);
  transport_->Abort(e);
}

// ---------------------------------------------------------------- ops

absl::StatusOr<WorkPtr> AlgorithmBackend::AllReduce(const Tensor& t, const AllReduceOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(t, "all_reduce", "tensor"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(t.dtype(), o.op), "all_reduce"));
  ReduceOp op = o.op;
  return Enqueue(OpType::kAllReduce, t.dtype(), t.numel(), o.timeout,
                 [this, t, op, stage = o.stage](const Comm& c) { return RunAllReduce(c, t, op, stage.get()); });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Broadcast(const Tensor& t, const BroadcastOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(t, "broadcast", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "broadcast", "options.root"));
  int root = o.root;
  return Enqueue(OpType::kBroadcast, t.dtype(), t.numel(), o.timeout,
                 [this, t, root](const Comm& c) { return RunBroadcast(c, t, root); });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Reduce(const Tensor& t, const ReduceOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(t, "reduce", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "reduce", "options.root"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(t.dtype(), o.op), "reduce"));
  int root = o.root;
  ReduceOp op = o.op;
  return Enqueue(OpType::kReduce, t.dtype(), t.numel(), o.timeout,
                 [this, t, op, root](const Comm& c) { return RunReduce(c, t, op, root); });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::AllGather(absl::Span<const Tensor> outputs,
                                                    const Tensor& input, const AllGatherOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(input, "all_gather", "input"));
  if (static_cast<int>(outputs.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather: outputs: expected ", size(),
                                                   " tensors, got ", outputs.size()));
  }
  std::vector<size_t> bytes;
  for (size_t i = 0; i < outputs.size(); ++i) {
    LOOM_RETURN_IF_ERROR(CheckTensorArg(outputs[i], "all_gather", absl::StrCat("outputs[", i, "]")));
    if (outputs[i].dtype() != input.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("all_gather: outputs[", i, "]: dtype ",
                                                     DTypeName(outputs[i].dtype()), " != input ",
                                                     DTypeName(input.dtype())));
    }
    bytes.push_back(outputs[i].nbytes());
  }
  if (outputs[rank()].numel() != input.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather: outputs[", rank(), "] has ",
                                                   outputs[rank()].numel(), " elements, input ",
                                                   input.numel()));
  }
  std::vector<Tensor> outs(outputs.begin(), outputs.end());
  size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  return Enqueue(OpType::kAllGather, input.dtype(), input.numel(), o.timeout,
                 [this, outs, input, bytes, total](const Comm& c) -> absl::Status {
                   std::vector<char> staging = Staging(total);
                   Tensor stage = Tensor::Wrap(staging.data(), {static_cast<int64_t>(total)}, DType::kBool);
                   LOOM_RETURN_IF_ERROR(RunAllGather(c, input, stage, bytes));
                   size_t off = 0;
                   for (size_t i = 0; i < outs.size(); ++i) {
                     if (bytes[i]) std::memcpy(outs[i].raw_data(), staging.data() + off, bytes[i]);
                     off += bytes[i];
                   }
                   return absl::OkStatus();
                 });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::AllGatherInto(const Tensor& output, const Tensor& input,
                                                        const AllGatherOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(input, "all_gather_into", "input"));
  LOOM_RETURN_IF_ERROR(CheckTensorArg(output, "all_gather_into", "output"));
  if (output.dtype() != input.dtype() || output.numel() != input.numel() * size()) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather_into: output: expected ",
                                                   DTypeName(input.dtype()), " with ",
                                                   input.numel() * size(), " elements, got ",
                                                   output.DebugString()));
  }
  std::vector<size_t> bytes(size(), input.nbytes());
  return Enqueue(OpType::kAllGatherInto, input.dtype(), input.numel(), o.timeout,
                 [this, output, input, bytes](const Comm& c) {
                   return RunAllGather(c, input, output, bytes);
                 });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::ReduceScatter(const Tensor& output,
                                                        absl::Span<const Tensor> inputs,
                                                        const ReduceScatterOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(output, "reduce_scatter", "output"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(output.dtype(), o.op), "reduce_scatter"));
  if (static_cast<int>(inputs.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: inputs: expected ", size(),
                                                   " tensors, got ", inputs.size()));
  }
  std::vector<size_t> counts;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_RETURN_IF_ERROR(CheckTensorArg(inputs[i], "reduce_scatter", absl::StrCat("inputs[", i, "]")));
    if (inputs[i].dtype() != output.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: inputs[", i, "]: dtype ",
                                                     DTypeName(inputs[i].dtype()), " != output ",
                                                     DTypeName(output.dtype())));
    }
    counts.push_back(static_cast<size_t>(inputs[i].numel()));
  }
  if (inputs[rank()].numel() != output.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: output: expected ",
                                                   inputs[rank()].numel(), " elements (inputs[",
                                                   rank(), "]), got ", output.numel()));
  }
  std::vector<Tensor> ins(inputs.begin(), inputs.end());
  ReduceOp op = o.op;
  return Enqueue(OpType::kReduceScatter, output.dtype(), output.numel(), o.timeout,
                 [this, output, ins, counts, op](const Comm& c) -> absl::Status {
                   size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
                   size_t es = DTypeSize(output.dtype());
                   LOOM_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({static_cast<int64_t>(total)}, output.dtype()));
                   size_t off = 0;
                   for (size_t i = 0; i < ins.size(); ++i) {
                     if (counts[i]) std::memcpy(static_cast<char*>(flat.raw_data()) + off, ins[i].raw_data(), counts[i] * es);
                     off += counts[i] * es;
                   }
                   return RunReduceScatter(c, flat, output, counts, op);
                 });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::ReduceScatterFrom(const Tensor& output, const Tensor& input,
                                                            const ReduceScatterOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(output, "reduce_scatter_from", "output"));
  LOOM_RETURN_IF_ERROR(CheckTensorArg(input, "reduce_scatter_from", "input"));
  LOOM_RETURN_IF_ERROR(Annotate(algorithms::CheckReducible(output.dtype(), o.op), "reduce_scatter_from"));
  if (output.dtype() != input.dtype() || input.numel() != output.numel() * size()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter_from: input: expected ",
                                                   DTypeName(output.dtype()), " with ",
                                                   output.numel() * size(), " elements, got ",
                                                   input.DebugString()));
  }
  std::vector<size_t> counts(size(), static_cast<size_t>(output.numel()));
  ReduceOp op = o.op;
  return Enqueue(OpType::kReduceScatterFrom, output.dtype(), output.numel(), o.timeout,
                 [this, output, input, counts, op](const Comm& c) {
                   return RunReduceScatter(c, input, output, counts, op);
                 });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::AllToAll(const Tensor& output, const Tensor& input,
                                                   const AllToAllOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(output, "all_to_all", "output"));
  LOOM_RETURN_IF_ERROR(CheckTensorArg(input, "all_to_all", "input"));
  if (output.dtype() != input.dtype()) {
    return absl::InvalidArgumentError("all_to_all: output: dtype differs from input");
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<size_t> send_bytes,
                        AllToAllSplitBytes(input, o.input_split_sizes, size(), "input"));
  LOOM_ASSIGN_OR_RETURN(std::vector<size_t> recv_bytes,
                        AllToAllSplitBytes(output, o.output_split_sizes, size(), "output"));
  return Enqueue(OpType::kAllToAll, input.dtype(), input.numel(), o.timeout,
                 [this, output, input, send_bytes, recv_bytes](const Comm& c) {
                   return RunAllToAll(c, input, send_bytes, output, recv_bytes);
                 });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Gather(absl::Span<const Tensor> outputs, const Tensor& input,
                                                 const GatherOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(input, "gather", "input"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "gather", "options.root"));
  std::vector<size_t> bytes(size(), 0);
  bytes[rank()] = input.nbytes();
  std::vector<Tensor> outs;
  if (rank() == o.root) {
    if (static_cast<int>(outputs.size()) != size()) {
      return absl::InvalidArgumentError(absl::StrCat("gather: outputs: expected ", size(),
                                                     " tensors on the root, got ", outputs.size()));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      LOOM_RETURN_IF_ERROR(CheckTensorArg(outputs[i], "gather", absl::StrCat("outputs[", i, "]")));
      if (outputs[i].dtype() != input.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat("gather: outputs[", i, "]: dtype differs from input"));
      }
      bytes[i] = outputs[i].nbytes();
    }
    if (bytes[rank()] != input.nbytes()) {
      return absl::InvalidArgumentError(absl::StrCat("gather: outputs[", rank(), "]: size differs from input"));
    }
    outs.assign(outputs.begin(), outputs.end());
  }
  int root = o.root;
  return Enqueue(OpType::kGather, input.dtype(), input.numel(), o.timeout,
                 [this, outs, input, bytes, root](const Comm& c) -> absl::Status {
                   size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
                   std::vector<char> staging = Staging(c.rank() == root ? total : 0);
                   LOOM_RETURN_IF_ERROR(RunGather(c, input, staging.data(), bytes, root));
                   size_t off = 0;
                   for (size_t i = 0; i < outs.size(); ++i) {
                     if (bytes[i]) std::memcpy(outs[i].raw_data(), staging.data() + off, bytes[i]);
                     off += bytes[i];
                   }
                   return absl::OkStatus();
                 });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Scatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                                  const ScatterOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(output, "scatter", "output"));
  LOOM_RETURN_IF_ERROR(CheckRank(o.root, size(), "scatter", "options.root"));
  std::vector<size_t> bytes(size(), 0);
  bytes[rank()] = output.nbytes();
  std::vector<Tensor> ins;
  if (rank() == o.root) {
    if (static_cast<int>(inputs.size()) != size()) {
      return absl::InvalidArgumentError(absl::StrCat("scatter: inputs: expected ", size(),
                                                     " tensors on the root, got ", inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      LOOM_RETURN_IF_ERROR(CheckTensorArg(inputs[i], "scatter", absl::StrCat("inputs[", i, "]")));
      if (inputs[i].dtype() != output.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat("scatter: inputs[", i, "]: dtype differs from output"));
      }
      bytes[i] = inputs[i].nbytes();
    }
    if (bytes[rank()] != output.nbytes()) {
      return absl::InvalidArgumentError(absl::StrCat("scatter: inputs[", rank(), "]: size differs from output"));
    }
    ins.assign(inputs.begin(), inputs.end());
  }
  int root = o.root;
  return Enqueue(OpType::kScatter, output.dtype(), output.numel(), o.timeout,
                 [this, output, ins, bytes, root](const Comm& c) -> absl::Status {
                   std::vector<char> staging;
                   if (c.rank() == root) {
                     for (size_t i = 0; i < ins.size(); ++i) {
                       const char* p = static_cast<const char*>(ins[i].raw_data());
                       staging.insert(staging.end(), p, p + bytes[i]);
                     }
                   }
                   return RunScatter(c, staging.data(), output, bytes, root);
                 });
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Send(const Tensor& t, int dst, const SendRecvOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(t, "send", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(dst, size(), "send", "dst"));
  if (dst == rank()) return absl::InvalidArgumentError("send: dst: cannot send to self");
  uint64_t tag = o.tag;
  return Enqueue(OpType::kSend, t.dtype(), t.numel(), o.timeout, nullptr,
                 [t, dst, tag](const Comm& c) {
                   return c.transport->ISend(dst, tag, t.raw_data(), t.nbytes(), c.deadline);
                 },
                 t);
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Recv(const Tensor& t, int src, const SendRecvOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckTensorArg(t, "recv", "tensor"));
  LOOM_RETURN_IF_ERROR(CheckRank(src, size(), "recv", "src"));
  if (src == rank()) return absl::InvalidArgumentError("recv: src: cannot receive from self");
  uint64_t tag = o.tag;
  return Enqueue(OpType::kRecv, t.dtype(), t.numel(), o.timeout, nullptr,
                 [t, src, tag](const Comm& c) {
                   return c.transport->IRecv(src, tag, t.raw_data(), t.nbytes());
                 },
                 t);
}

absl::StatusOr<WorkPtr> AlgorithmBackend::Barrier(const BarrierOptions& o) {
  return Enqueue(OpType::kBarrier, DType::kBool, 0, o.timeout,
                 [this](const Comm& c) { return RunBarrier(c); });
}

// ---------------------------------------------------------------- default hooks

absl::Status AlgorithmBackend::RunAllReduce(const algorithms::Comm& c, const Tensor& t, ReduceOp op,
                                            const StageHooks* hooks) {
  const int slices = channels_ ? channels_->Slices(t.nbytes()) : 1;
  if (slices <= 1) return algorithms::AllReduce(c, t.raw_data(), t.numel(), t.dtype(), op, hooks);
  // Contiguous slices, one per channel; each is an independent all_reduce.
  const size_t count = static_cast<size_t>(t.numel()), es = DTypeSize(t.dtype());
  char* base = static_cast<char*>(t.raw_data());
  auto lo = [&](int k) { return count * k / slices; };
  // Staged: every slice's first reads are announced before any slice's
  // later ones, and each slice's ranges are offset to the whole buffer.
  std::vector<StageHooks> slice_hooks;
  if (hooks) {
    std::vector<std::vector<algorithms::ByteRange>> needs(slices);
    size_t longest = 0;
    for (int k = 0; k < slices; ++k) {
      needs[k] = algorithms::AllReduceNeeds(c.size(), c.rank(), lo(k + 1) - lo(k), t.dtype(), hooks->piece_bytes);
      longest = std::max(longest, needs[k].size());
    }
    for (size_t i = 0; hooks->need && i < longest; ++i)
      for (int k = 0; k < slices; ++k)
        if (i < needs[k].size()) hooks->need(lo(k) * es + needs[k][i].offset, needs[k][i].bytes);
    for (int k = 0; k < slices; ++k) {
      const size_t at = lo(k) * es;
      slice_hooks.push_back({nullptr, [hooks, at](size_t o, size_t b) { return hooks->ready(at + o, b); },
                             [hooks, at](size_t o, size_t b) { hooks->done(at + o, b); }, hooks->piece_bytes});
    }
  }
  return channels_->Run(slices, c.transport, [&](int k, transport::Transport* tr) {
    algorithms::Comm ck{tr, c.tag_base, c.deadline};
    return algorithms::AllReduce(ck, base + lo(k) * es, lo(k + 1) - lo(k), t.dtype(), op,
                                 hooks ? &slice_hooks[k] : nullptr);
  });
}
absl::Status AlgorithmBackend::RunBroadcast(const algorithms::Comm& c, const Tensor& t, int root) {
  return algorithms::BinomialBroadcast(c, t.raw_data(), t.nbytes(), root);
}
absl::Status AlgorithmBackend::RunReduce(const algorithms::Comm& c, const Tensor& t, ReduceOp op, int root) {
  return algorithms::BinomialReduce(c, t.raw_data(), t.numel(), t.dtype(), op, root);
}
// Channel slice k of s of a block of n units: [n*k/s, n*(k+1)/s).
static size_t SliceLo(size_t n, int k, int s) { return n * k / s; }

absl::Status AlgorithmBackend::RunAllGather(const algorithms::Comm& c, const Tensor& in, const Tensor& out_flat,
                                            absl::Span<const size_t> bytes) {
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  const int slices = channels_ ? channels_->Slices(total) : 1;
  if (slices <= 1) return algorithms::RingAllGather(c, in.raw_data(), out_flat.raw_data(), bytes);
  // Slice k gathers byte range k of every rank's segment, over channel k.
  const int n = c.size(), r = c.rank();
  std::vector<size_t> seg_off(n, 0);
  for (int i = 1; i < n; ++i) seg_off[i] = seg_off[i - 1] + bytes[i - 1];
  const char* src = static_cast<const char*>(in.raw_data());
  char* dst = static_cast<char*>(out_flat.raw_data());
  return channels_->Run(slices, c.transport, [&](int k, transport::Transport* tr) {
    std::vector<size_t> b(n), off(n);
    for (int i = 0; i < n; ++i) {
      size_t lo = SliceLo(bytes[i], k, slices);
      b[i] = SliceLo(bytes[i], k + 1, slices) - lo;
      off[i] = seg_off[i] + lo;
    }
    algorithms::Comm ck{tr, c.tag_base, c.deadline};
    return algorithms::RingAllGatherAt(ck, src + SliceLo(bytes[r], k, slices), dst, b, off);
  });
}
absl::Status AlgorithmBackend::RunReduceScatter(const algorithms::Comm& c, const Tensor& in_flat, const Tensor& out,
                                                absl::Span<const size_t> counts, ReduceOp op) {
  const size_t es = DTypeSize(out.dtype());
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const int slices = channels_ ? channels_->Slices(total * es) : 1;
  if (slices <= 1) {
    return algorithms::RingReduceScatter(c, in_flat.raw_data(), out.raw_data(), counts, out.dtype(), op);
  }
  // Slice k reduces element range k of every rank's block, over channel k.
  const int n = c.size(), r = c.rank();
  std::vector<size_t> block_off(n, 0);
  for (int i = 1; i < n; ++i) block_off[i] = block_off[i - 1] + counts[i - 1];
  char* dst = static_cast<char*>(out.raw_data());
  return channels_->Run(slices, c.transport, [&](int k, transport::Transport* tr) {
    std::vector<size_t> cnt(n), off(n);
    for (int i = 0; i < n; ++i) {
      size_t lo = SliceLo(counts[i], k, slices);
      cnt[i] = SliceLo(counts[i], k + 1, slices) - lo;
      off[i] = block_off[i] + lo;
    }
    algorithms::Comm ck{tr, c.tag_base, c.deadline};
    return algorithms::RingReduceScatterAt(ck, in_flat.raw_data(), off, dst + SliceLo(counts[r], k, slices) * es,
                                           cnt, out.dtype(), op);
  });
}
absl::Status AlgorithmBackend::RunAllToAll(const algorithms::Comm& c, const Tensor& in,
                                           absl::Span<const size_t> send_bytes, const Tensor& out,
                                           absl::Span<const size_t> recv_bytes) {
  return algorithms::PairwiseAllToAll(c, in.raw_data(), send_bytes, out.raw_data(), recv_bytes);
}
absl::Status AlgorithmBackend::RunGather(const algorithms::Comm& c, const Tensor& in, void* out,
                                         absl::Span<const size_t> bytes, int root) {
  return algorithms::Gather(c, in.raw_data(), out, bytes, root);
}
absl::Status AlgorithmBackend::RunScatter(const algorithms::Comm& c, const void* in, const Tensor& out,
                                          absl::Span<const size_t> bytes, int root) {
  return algorithms::Scatter(c, in, out.raw_data(), bytes, root);
}
absl::Status AlgorithmBackend::RunBarrier(const algorithms::Comm& c) { return algorithms::DisseminationBarrier(c); }

}  // namespace loom::collectives
