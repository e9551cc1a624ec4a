#include "compiler/lowering.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/fused_kernel.h"
#include "compiler/ir/verifier.h"
#include "kernels/spmd_ops.h"

namespace loom::compiler {
namespace {

// Binds a collective node to the communicator of its group.
absl::StatusOr<kernels::KernelFn> CollectiveKernel(const ir::Node& n, const comm::CommunicatorMap& comms) {
  static comm::SingleRankCommunicator* single = new comm::SingleRankCommunicator();
  const std::string group = n.attrs.GetString("group", "world");
  const int64_t world = n.attrs.GetInt("world", 1);
  comm::Communicator* comm = single;
  if (auto it = comms.find(group); it != comms.end()) {
    comm = it->second;
  } else if (world != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(n.op, ": no communicator is bound for group '", group, "' (world ", world, ")"));
  }
  if (n.attrs.Has("world") && comm->size() != world)
    return absl::FailedPreconditionError(absl::StrCat(n.op, ": group '", group, "' has ", comm->size(),
                                                      " ranks but the node says world ", world));
  LOOM_ASSIGN_OR_RETURN(comm::ReduceKind kind, comm::ParseReduceKind(n.attrs.GetString("reduce", "sum")));
  const std::string op = n.op;
  int64_t axis = n.attrs.GetInt("axis", 0);
  const int64_t ignore = n.attrs.GetInt("ignore_index", -100);
  return kernels::KernelFn([comm, kind, op, axis, ignore](absl::Span<const Tensor> in, absl::Span<Tensor> out,
                                                          const kernels::Attrs&) -> absl::Status {
    int ax = static_cast<int>(axis < 0 ? axis + in[0].ndim() : axis);
    if (op == "all_reduce") return comm->AllReduce(in[0], out[0], kind);
    if (op == "all_gather") return comm->AllGather(in[0], out[0], ax);
    if (op == "reduce_scatter") return comm->ReduceScatter(in[0], out[0], ax, kind);
    if (op == "vocab_onehot")  // kernels/spmd_ops.cc: one-hot of this rank's vocabulary block
      return kernels::VocabOnehotBlock(in[0], out[0], out[1], comm->rank(), ignore);
    if (op == "shard_slice") {  // kernels/spmd_ops.cc: this rank's block, no communication
      const int64_t len = out[0].shape()[ax];
      return out[0].CopyFrom(in[0].Narrow(ax, comm->rank() * len, len));
    }
    return absl::UnimplementedError(absl::StrCat("no communicator call for collective op ", op));
  });
}

// The outputs written straight into the input they update (value, input
// index): LoweringOptions::in_place_updates.
std::vector<std::pair<int, int>> InPlaceUpdates(const ir::Graph& g, const LoweringOptions& options) {
  std::vector<std::pair<int, int>> out;
  if (!options.in_place_updates) return out;
  const int n = static_cast<int>(g.nodes().size());
  std::vector<int> producer(g.values().size(), -1), last_use(g.values().size(), -1), out_count(g.values().size(), 0);
  std::vector<bool> written(g.inputs().size(), false);
  for (int i = 0; i < n; ++i) {
    for (int v : g.nodes()[i].outputs) producer[v] = i;
    for (int v : g.nodes()[i].inputs) last_use[v] = i;
  }
  for (const ir::GraphOutput& o : g.outputs()) ++out_count[o.value];
  for (const ir::GraphOutput& o : g.outputs()) {
    if (o.updates < 0) continue;
    const int v = o.value, node = producer[v], k = o.updates;
    if (node < 0 || out_count[v] != 1 || written[k]) continue;
    if (last_use[g.inputs()[k].value] > node) continue;  // someone reads the old value later
    if (out_count[g.inputs()[k].value] > 0) continue;     // the old value is itself returned
    const ir::Node& nd = g.nodes()[node];
    const kernels::OpDef* def = kernels::OpRegistry::Global().Find(nd.op);
    bool allowed = (def != nullptr && def->elementwise) ||
                   std::find(options.in_place_ops.begin(), options.in_place_ops.end(), nd.op) !=
                       options.in_place_ops.end();
    if (!allowed) continue;
    written[k] = true;
    out.push_back({v, k});
  }
  return out;
}

}  // namespace

absl::StatusOr<passes::MemoryPlan> PlanLoweredMemory(const ir::Graph& g, const LoweringOptions& options) {
  LOOM_RETURN_IF_ERROR(ir::Verify(g));
  std::vector<int> external;
  for (const auto& [v, k] : InPlaceUpdates(g, options)) external.push_back(v);
  return passes::PlanMemory(g, 64, external);
}

absl::StatusOr<std::unique_ptr<Program>> Lower(const ir::Graph& g, const LoweringOptions& options) {
  LOOM_RETURN_IF_ERROR(ir::Verify(g));
  auto p = std::make_unique<Program>();
  p->graph = g;
  // value id -> the graph input whose tensor holds it (graph inputs themselves,
  // and outputs updated in place).
  std::vector<int> input_index(g.values().size(), -1);
  p->input_written.assign(g.inputs().size(), false);
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    input_index[g.inputs()[i].value] = static_cast<int>(i);
    p->input_metas.push_back(g.meta(g.inputs()[i].value));
  }
  const std::vector<std::pair<int, int>> in_place = InPlaceUpdates(g, options);
  std::vector<int> external;
  for (const auto& [v, k] : in_place) {
    p->input_written[k] = true;
    input_index[v] = k;
    external.push_back(v);
  }
  LOOM_ASSIGN_OR_RETURN(p->plan, passes::PlanMemory(g, 64, external));
  char* base = nullptr;
  if (p->plan.peak_bytes > 0) {
    Allocator* alloc = DefaultCpuAllocator();
    size_t bytes = static_cast<size_t>(p->plan.peak_bytes);
    base = static_cast<char*>(alloc->Allocate(bytes));
    p->arena = std::shared_ptr<void>(base, [alloc, bytes](void* q) { alloc->Deallocate(q, bytes); });
  }
  std::vector<Tensor> views(g.values().size());
  auto view_of = [&](int v) {
    if (!views[v].defined()) {
      const passes::BufferAssignment* b = p->plan.Find(v);
      views[v] = Tensor::Wrap(base == nullptr ? nullptr : base + b->offset, g.meta(v).shape, g.meta(v).dtype);
    }
    return views[v];
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = g.nodes()[i];
    const std::string where = absl::StrCat("node ", i, " (", n.op, ")");
    KernelCall c;
    c.op = n.op;
    c.node = static_cast<int>(i);
    c.attrs = n.attrs;
    std::vector<ir::TensorMeta> in_metas, out_metas;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int v = n.inputs[k];
      in_metas.push_back(g.meta(v));
      if (input_index[v] >= 0) {
        c.bind.push_back({static_cast<int>(k), input_index[v]});
        c.inputs.emplace_back();
      } else {
        c.inputs.push_back(view_of(v));
      }
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      int v = n.outputs[k];
      out_metas.push_back(g.meta(v));
      if (input_index[v] >= 0) {
        c.out_bind.push_back({static_cast<int>(k), input_index[v]});
        c.outputs.emplace_back();
      } else {
        c.outputs.push_back(view_of(v));
      }
    }
    if (n.op == ir::kFusedOp) {
      auto k = FusedKernel::Create(*n.subgraph, options.impl, options.fused_chunk_elems);
      if (!k.ok()) return Annotate(k.status(), where);
      p->scratch_bytes += (*k)->scratch_bytes();
      c.fn = FusedKernel::AsKernelFn(*k);
    } else {
      auto def = kernels::OpRegistry::Global().Get(n.op);
      if (!def.ok()) return Annotate(def.status(), where);
      if ((*def)->collective) {
        auto fn = CollectiveKernel(n, options.communicators);
        if (!fn.ok()) return Annotate(fn.status(), where);
        c.fn = *fn;
      } else {
        auto fn = ResolveKernel(**def, in_metas, out_metas, options.impl);
        if (!fn.ok()) return Annotate(fn.status(), where);
        c.fn = *fn;
      }
    }
    p->calls.push_back(std::move(c));
  }
  for (const ir::GraphOutput& o : g.outputs()) {
    Program::OutputSource src;
    src.updates = o.updates;
    if (input_index[o.value] >= 0) src.input = input_index[o.value];
    else src.view = view_of(o.value);
    p->outputs.push_back(std::move(src));
  }
  return p;
}

std::string Program::ToString() const {
  std::string s = absl::StrCat("# program @", graph.name(), ": ", calls.size(), " calls, arena ", plan.peak_bytes,
                               " bytes (liveness bound ", plan.live_bytes_bound, "), fused scratch ",
                               scratch_bytes, " bytes\n");
  auto where = [&](int v) -> std::string {
    for (size_t i = 0; i < graph.inputs().size(); ++i)
      if (graph.inputs()[i].value == v) return absl::StrCat("%", graph.inputs()[i].name);
    const passes::BufferAssignment* b = plan.Find(v);
    if (b) return absl::StrCat("@", b->offset);
    for (const ir::GraphOutput& o : graph.outputs())
      if (o.value == v && o.updates >= 0) return absl::StrCat("%", graph.inputs()[o.updates].name, " (in place)");
    return "?";
  };
  for (const KernelCall& c : calls) {
    const ir::Node& n = graph.nodes()[c.node];
    std::vector<std::string> ins, outs;
    for (int v : n.inputs) ins.push_back(where(v));
    for (int v : n.outputs) outs.push_back(absl::StrCat(where(v), " ", graph.meta(v).ToString()));
    absl::StrAppend(&s, c.node, ": ", c.op, "(", absl::StrJoin(ins, ", "), ") -> ", absl::StrJoin(outs, ", "), "\n");
  }
  return s;
}

}  // namespace loom::compiler
