#include "collectives/process_group.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status.h"

namespace loom::collectives {

absl::StatusOr<BackendSpec> ParseBackendSpec(absl::string_view spec) {
  BackendSpec out;
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    std::vector<absl::string_view> kv = absl::StrSplit(entry, ':');
    if (kv.size() == 1) {
      if (kv[0].empty()) return absl::InvalidArgumentError(absl::StrCat("backend spec '", spec, "': empty entry"));
      out.default_backend = std::string(kv[0]);
      continue;
    }
    if (kv.size() != 2 || kv[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("backend spec '", spec, "': entry '", entry,
                                                     "' is not device:backend"));
    }
    DeviceKind kind;
    if (kv[0] == "cpu") {
      kind = DeviceKind::kCPU;
    } else if (kv[0] == "cuda") {
      kind = DeviceKind::kCUDA;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("backend spec '", spec, "': unknown device '",
                                                     kv[0], "' (expected cpu or cuda)"));
    }
    if (out.by_device.count(kind)) {
      return absl::InvalidArgumentError(absl::StrCat("backend spec '", spec, "': device '", kv[0],
                                                     "' listed twice"));
    }
    out.by_device[kind] = std::string(kv[1]);
    if (out.default_backend.empty()) out.default_backend = std::string(kv[1]);
  }
  if (out.default_backend.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("backend spec '", spec, "': no backend named"));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Create(std::shared_ptr<store::Store> store, int rank,
                                                                   int size, ProcessGroupOptions o) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("ProcessGroup::Create: rank ", rank,
                                                   " not in a group of size ", size));
  }
  LOOM_ASSIGN_OR_RETURN(BackendSpec spec, ParseBackendSpec(o.backend));
  const std::vector<std::string> registered = RegisteredBackends();
  for (auto& [kind, name] : spec.by_device) {
    std::string variant = absl::StrCat("cuda:", name);
    if (kind == DeviceKind::kCUDA && std::find(registered.begin(), registered.end(), variant) != registered.end()) {
      name = variant;
    }
  }
  std::unique_ptr<ProcessGroup> pg(new ProcessGroup());
  pg->store_ = std::move(store);
  pg->rank_ = rank;
  pg->size_ = size;
  for (int i = 0; i < size; ++i) pg->parent_ranks_.push_back(i);
  pg->options_ = o;
  pg->spec_ = spec;
  std::vector<std::string> names{spec.default_backend};
  for (const auto& [kind, name] : spec.by_device) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  for (const std::string& name : names) {
    BackendContext ctx;
    ctx.store = std::make_shared<store::PrefixStore>(pg->store_, name);
    ctx.rank = rank;
    ctx.size = size;
    ctx.timeout = o.timeout;
    ctx.flight_recorder_dir = o.flight_recorder_dir;
    ctx.staging_bucket_bytes = o.staging_bucket_bytes;
    ctx.staging_piece_bytes = o.staging_piece_bytes;
    ctx.staging_path = o.staging_path;
    ctx.channels = o.channels;
    ctx.channel_min_slice_bytes = o.channel_min_slice_bytes;
    ctx.gloo_native_min_bytes = o.gloo_native_min_bytes;
    ctx.gloo_transport = o.gloo_transport;
    ctx.tcp_socket_buffer_bytes = o.tcp_socket_buffer_bytes;
    auto b = CreateBackend(name, ctx);
    if (b.ok()) {
      pg->backends_[name] = *b;
    } else if (absl::IsUnavailable(b.status())) {
      pg->unavailable_[name] = b.status();  // reported when a call needs it
    } else {
      return Annotate(b.status(), absl::StrCat("ProcessGroup: creating backend '", name, "'"));
    }
  }
  return pg;
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::NewGroup(std::vector<int> ranks) {
  int id = next_group_id_++;
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
      sorted.front() < 0 || sorted.back() >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("new_group: ranks: expected distinct ranks in [0, ",
                                                   size_, "), got [", absl::StrJoin(ranks, ", "), "]"));
  }
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return std::unique_ptr<ProcessGroup>();
  int new_rank = static_cast<int>(it - ranks.begin());
  auto store = std::make_shared<store::PrefixStore>(store_, absl::StrCat("group", id));
  LOOM_ASSIGN_OR_RETURN(auto pg, Create(store, new_rank, static_cast<int>(ranks.size()), options_));
  pg->parent_ranks_ = ranks;
  return pg;
}

absl::StatusOr<Backend*> ProcessGroup::BackendFor(Device device, OpType op, DType dtype) {
  auto it = spec_.by_device.find(device.kind);
  const std::string& name = it != spec_.by_device.end() ? it->second : spec_.default_backend;
  auto u = unavailable_.find(name);
  if (u != unavailable_.end()) {
    return absl::UnavailableError(absl::StrCat(OpTypeName(op), ": device ", device.ToString(),
                                               ": backend ", name, " is unavailable: ",
                                               u->second.message()));
  }
  Backend* b = backends_.at(name).get();
  if (!b->Supports(op, dtype, device.kind)) {
    return absl::UnimplementedError(absl::StrCat(OpTypeName(op), ": backend ", name,
                                                 " does not support dtype ", DTypeName(dtype),
                                                 " on device ", device.ToString(), " (spec '",
                                                 options_.backend, "')"));
  }
  return b;
}

absl::StatusOr<Backend*> ProcessGroup::Pick(OpType op, const Tensor& first,
                                            absl::Span<const Tensor> others) {
  if (!first.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(OpTypeName(op), ": undefined tensor"));
  }
  for (const Tensor& t : others) {
    if (t.defined() && t.device() != first.device()) {
      return absl::InvalidArgumentError(absl::StrCat(OpTypeName(op), ": tensors on different devices (",
                                                     first.device().ToString(), " and ",
                                                     t.device().ToString(), ")"));
    }
  }
  return BackendFor(first.device(), op, first.dtype());
}

#define LOOM_PG_DISPATCH(op_type, first, others, ...) \
  LOOM_ASSIGN_OR_RETURN(Backend * b, Pick(op_type, first, others)); \
  return b->__VA_ARGS__

absl::StatusOr<WorkPtr> ProcessGroup::AllReduce(const Tensor& t, const AllReduceOptions& o) {
  if (o.stage) {
    return absl::InvalidArgumentError(
        "all_reduce: options.stage is set only by a staging backend for its inner backend, not through a group");
  }
  LOOM_PG_DISPATCH(OpType::kAllReduce, t, {}, AllReduce(t, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::Broadcast(const Tensor& t, const BroadcastOptions& o) {
  LOOM_PG_DISPATCH(OpType::kBroadcast, t, {}, Broadcast(t, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::Reduce(const Tensor& t, const ReduceOptions& o) {
  LOOM_PG_DISPATCH(OpType::kReduce, t, {}, Reduce(t, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::AllGather(absl::Span<const Tensor> outputs, const Tensor& input,
                                                const AllGatherOptions& o) {
  LOOM_PG_DISPATCH(OpType::kAllGather, input, outputs, AllGather(outputs, input, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::AllGatherInto(const Tensor& output, const Tensor& input,
                                                    const AllGatherOptions& o) {
  LOOM_PG_DISPATCH(OpType::kAllGatherInto, input, {output}, AllGatherInto(output, input, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::ReduceScatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                                    const ReduceScatterOptions& o) {
  LOOM_PG_DISPATCH(OpType::kReduceScatter, output, inputs, ReduceScatter(output, inputs, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::ReduceScatterFrom(const Tensor& output, const Tensor& input,
                                                        const ReduceScatterOptions& o) {
  LOOM_PG_DISPATCH(OpType::kReduceScatterFrom, output, {input}, ReduceScatterFrom(output, input, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::AllToAll(const Tensor& output, const Tensor& input,
                                               const AllToAllOptions& o) {
  LOOM_PG_DISPATCH(OpType::kAllToAll, input, {output}, AllToAll(output, input, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::Gather(absl::Span<const Tensor> outputs, const Tensor& input,
                                             const GatherOptions& o) {
  LOOM_PG_DISPATCH(OpType::kGather, input, outputs, Gather(outputs, input, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::Scatter(const Tensor& output, absl::Span<const Tensor> inputs,
                                              const ScatterOptions& o) {
  LOOM_PG_DISPATCH(OpType::kScatter, output, inputs, Scatter(output, inputs, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::Send(const Tensor& t, int dst, const SendRecvOptions& o) {
  LOOM_PG_DISPATCH(OpType::kSend, t, {}, Send(t, dst, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::Recv(const Tensor& t, int src, const SendRecvOptions& o) {
  LOOM_PG_DISPATCH(OpType::kRecv, t, {}, Recv(t, src, o));
}
absl::StatusOr<WorkPtr> ProcessGroup::Barrier(const BarrierOptions& o) {
  auto u = unavailable_.find(spec_.default_backend);
  if (u != unavailable_.end()) {
    return absl::UnavailableError(absl::StrCat("barrier: backend ", spec_.default_backend,
                                               " is unavailable: ", u->second.message()));
  }
  return backends_.at(spec_.default_backend)->Barrier(o);
}

absl::Status ProcessGroup::DumpFlightRecorders(const std::string& dir) {
  for (const auto& [name, b] : backends_) {
    if (FlightRecorder* fr = b->flight_recorder()) {
      LOOM_RETURN_IF_ERROR(fr->DumpToFile(absl::StrCat(dir, "/", name, ".rank", rank_, ".txt")));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::collectives
