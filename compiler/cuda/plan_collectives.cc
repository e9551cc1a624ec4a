// lower_nodes' launches for a parallel program's ops (plan_collectives.h).
#include "compiler/cuda/plan_collectives.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::compiler::cuda::plan_internal {

namespace {

int GroupRank(const PlanState& s, const ir::Node& n) {
  auto it = s.options.group_rank.find(n.attrs.GetString("group", "world"));
  return it == s.options.group_rank.end() ? 0 : it->second;
}

// A strided copy of `src` (geometry `geom`) into `dst`.
void EmitCopy(PlanState& s, const std::string& op, int node, int src, int dst, CopyGeom geom) {
  Launch c;
  c.kind = LaunchKind::kCopy;
  c.op = op;
  c.node = node;
  c.nodes = {node};
  c.inputs = {src};
  c.outputs = {dst};
  c.copies = {std::move(geom)};
  s.p.launches.push_back(std::move(c));
}

// The geometry that views a tensor of `shape` split along `axis` into
// `world` blocks as [world, block shape...]: for every index (w, i...),
// element i of block w. `lead` are the element strides of the block-major
// [world, block...] layout, `strided` those of the same element in `shape`.
struct BlockGeom {
  Shape blocks;                  // [world, shape with dim axis / world]
  std::vector<int64_t> lead;     // contiguous strides of `blocks`
  std::vector<int64_t> strided;  // strides into the tensor of `shape`
};
BlockGeom Blocks(const Shape& shape, int64_t axis, int64_t world) {
  BlockGeom b;
  b.blocks = shape;
  b.blocks[axis] /= world;
  b.blocks.insert(b.blocks.begin(), world);
  b.lead = Contig(b.blocks);
  const std::vector<int64_t> st = Contig(shape);
  b.strided = st;
  b.strided.insert(b.strided.begin(), st[axis] * b.blocks[axis + 1]);
  return b;
}

absl::Status LowerCollective(PlanState& s, int i, Launch L) {
  const ir::Node& n = s.g.nodes()[i];
  const int in = n.inputs[0], out = n.outputs[0];
  if (s.p.root[in] < 0) return Unsupported(s.g, i, "input is not materialised");
  const DType dt = s.p.metas[out].dtype;
  const Shape& os = s.g.meta(out).shape;
  const int64_t world = n.attrs.GetInt("world", 1);
  const int64_t axis = NormAxis(n.attrs.GetInt("axis", 0), os.size());
  L.kind = LaunchKind::kCollective;
  L.inputs = {s.want(in, dt)};
  L.outputs = {out};
  if (n.op == "all_reduce" || axis == 0 || world == 1) {
    s.p.launches.push_back(std::move(L));
    return absl::OkStatus();
  }
  if (n.op == "all_gather") {  // gather [world, in...], then place each block
    const BlockGeom b = Blocks(os, axis, world);
    const int tmp = s.new_value({dt, b.blocks});
    L.outputs = {tmp};
    L.attrs.Set("axis", int64_t{0});
    s.p.launches.push_back(std::move(L));
    EmitCopy(s, "all_gather:place", i, tmp, out, CopyGeom{b.blocks, 0, b.lead, 0, b.strided});
    return absl::OkStatus();
  }
  // reduce_scatter: lay the blocks out [world, out...], then scatter on dim 0.
  const BlockGeom b = Blocks(s.g.meta(in).shape, axis, world);
  const int tmp = s.new_value({dt, b.blocks});
  EmitCopy(s, "reduce_scatter:blocks", i, L.inputs[0], tmp, CopyGeom{b.blocks, 0, b.strided, 0, b.lead});
  L.inputs = {tmp};
  L.attrs.Set("axis", int64_t{0});
  s.p.launches.push_back(std::move(L));
  return absl::OkStatus();
}

}  // namespace

bool IsSpmdOp(const std::string& op) {
  return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" || op == "shard_slice" ||
         op == "vocab_onehot";
}

absl::Status LowerSpmdOp(PlanState& s, int i, Launch L) {
  const ir::Node& n = s.g.nodes()[i];
  if (n.op == "all_reduce" || n.op == "all_gather" || n.op == "reduce_scatter")
    return LowerCollective(s, i, std::move(L));
  if (n.op == "shard_slice") {
    const int in = n.inputs[0], out = n.outputs[0];
    if (s.p.root[in] < 0) return Unsupported(s.g, i, "input is not materialised");
    const Shape& is = s.g.meta(in).shape;
    const int64_t axis = NormAxis(n.attrs.GetInt("axis", 0), is.size());
    const std::vector<int64_t> st = Contig(is);
    const int64_t len = s.g.meta(out).shape[axis];
    EmitCopy(s, "shard_slice", i, in, out, CopyGeom{s.g.meta(out).shape, GroupRank(s, n) * len * st[axis], st, 0, {}});
    return absl::OkStatus();
  }
  // vocab_onehot: ids in, (onehot, valid) out in their storage dtypes.
  L.kind = LaunchKind::kVocabOnehot;
  L.inputs = n.inputs;
  L.outputs = n.outputs;
  L.attrs.Set("rank", static_cast<int64_t>(GroupRank(s, n)));
  s.p.launches.push_back(std::move(L));
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::plan_internal
