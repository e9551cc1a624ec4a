// FuseCrossEntropy (plan.h) and the fuse_cross_entropy pass (plan_fuse_ce.h).
#include "compiler/cuda/plan_fuse_ce.h"

#include <algorithm>
#include <utility>

namespace loom::compiler::cuda {

int FuseCrossEntropy(CudaPlan& p) {
  auto root = [&](int v) { return v >= 0 && v < static_cast<int>(p.root.size()) && p.root[v] >= 0 ? p.root[v] : v; };
  int fused = 0;
  for (size_t b = 0; b < p.launches.size(); ++b) {
    const Launch& bw = p.launches[b];
    if (bw.kind != LaunchKind::kCrossEntropyBackward || bw.inputs.size() != 4 || bw.outputs.size() != 1) continue;
    // The forward whose lse the backward reads.
    int f = -1;
    for (int i = static_cast<int>(b) - 1; i >= 0 && f < 0; --i) {
      const Launch& l = p.launches[i];
      if (l.kind == LaunchKind::kCrossEntropy && l.outputs.size() == 2 && l.outputs[1] == bw.inputs[3]) f = i;
    }
    if (f < 0) continue;
    const Launch& fw = p.launches[f];
    if (fw.inputs.size() != 2 || fw.inputs[0] != bw.inputs[1] || fw.inputs[1] != bw.inputs[2]) continue;
    if (fw.attrs.GetInt("ignore_index", -100) != bw.attrs.GetInt("ignore_index", -100)) continue;
    // Moving the forward down to the backward must not change what any launch
    // in between sees: none reads the loss or lse, none writes logits/targets.
    const int loss = root(fw.outputs[0]), lse = root(fw.outputs[1]);
    const int logits = root(fw.inputs[0]), targets = root(fw.inputs[1]);
    bool ok = true;
    for (size_t i = f + 1; i < b && ok; ++i) {
      for (int v : p.launches[i].inputs) ok = ok && root(v) != loss && root(v) != lse;
      for (int v : p.launches[i].outputs) ok = ok && root(v) != logits && root(v) != targets;
    }
    if (!ok) continue;
    Launch l;
    l.kind = LaunchKind::kCrossEntropyFused;
    l.op = "cross_entropy+cross_entropy_backward";
    l.node = fw.node;
    l.nodes = fw.nodes;
    l.nodes.insert(l.nodes.end(), bw.nodes.begin(), bw.nodes.end());
    l.attrs = fw.attrs;
    l.inputs = {bw.inputs[0], fw.inputs[0], fw.inputs[1]};
    l.outputs = {fw.outputs[0], fw.outputs[1], bw.outputs[0]};
    p.launches[b] = std::move(l);
    p.launches.erase(p.launches.begin() + f);
    --b;  // the fused launch moved up one place
    ++fused;
  }
  return fused;
}

}  // namespace loom::compiler::cuda

namespace loom::compiler::cuda::plan_internal {

absl::StatusOr<bool> FuseCrossEntropyPass::Run(PlanState& s) {
  if (!s.options.fuse_cross_entropy) return false;
  return FuseCrossEntropy(s.p) > 0;
}

}  // namespace loom::compiler::cuda::plan_internal
