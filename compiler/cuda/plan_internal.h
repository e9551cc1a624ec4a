// Private to the plan library (include only from plan*.cc): the state that
// PlanCuda (plan.h) threads through its passes, and the helpers they share.
//   plan.cc            Planner setup, the walk over the graph's nodes, PlanCuda
//   plan_dtypes.cc     StorageDTypes (the mixed-precision policy), Producers, Users
//   plan_gemm.cc       matmul -> GEMM with its epilogue / weight-gradient fusions
//   plan_copies.cc     strided copies and views (ViewStrides, composed copies)
//   plan_attention.cc  flash attention with strided operands (attn_views)
//   plan_arena.cc      arena offsets: best-fit over launch positions
//   plan_describe.cc   LaunchKindName, GemmEpilogueName, CudaPlan::Bytes/Describe
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::cuda::plan_internal {

// Per graph value: the node that writes it (-1 for graph inputs).
std::vector<int> Producers(const Graph& g);
// Per graph value: the nodes that read it, in graph order, each once.
std::vector<std::vector<int>> Users(const Graph& g);
// Contiguous element strides of `shape`.
std::vector<int64_t> Contig(absl::Span<const int64_t> shape);
int64_t NormAxis(int64_t axis, size_t rank);
// Unimplemented naming node's op: no CUDA launch for it (`why`).
absl::Status Unsupported(const Graph& g, int node, absl::string_view why);

// One PlanCuda call: the plan under construction and what its passes share.
struct Planner {
  Planner(const Graph& graph, bool bf16, const PlanOptions& opts);

  // plan.cc
  absl::Status PlanLaunches();          // every launch, in graph order
  int new_value(TensorMeta m);          // a plan value past the graph's
  int want(int v, DType dt);            // v in storage dtype dt (shadow or cast)
  bool available_before(int v, int node) const;
  int single_user(int v) const;         // v's only reader (reading it once), or -1
  // plan_gemm.cc
  absl::Status PlanMatmul(int i, Launch L);
  // plan_copies.cc
  bool PlanCopy(int i, Launch& L);
  // plan_attention.cc
  bool flash_node(int u) const;
  bool feeds_flash_only(int v) const;
  static bool flash_strides_ok(int64_t offset, const std::vector<int64_t>& s, int64_t d);
  AttnView view_of(int v) const;
  void PlanSdpaViews(int i, Launch& L);
  void PlanSdpaBackwardViews(int i, Launch& L);
  // plan_arena.cc
  absl::Status AssignArena();

  const Graph& g;
  const PlanOptions& options;
  CudaPlan p;
  std::vector<DType> st;  // StorageDTypes of the graph's values
  std::vector<bool> is_shadow;  // per plan value
  std::vector<int> prod;
  std::vector<std::vector<int>> users;
  std::vector<bool> is_output;
  int nn = 0;  // graph nodes
  std::vector<bool> done;  // per node: covered by an earlier launch
  DType cdt = DType::kF32;  // GEMM compute dtype
  bool attn_views = false;  // options.attn_views under bf16
  std::map<int, AttnView> attn_view;  // values read through a strided window (view_of)
  // Views folded into a later concat: reshape output -> (geometry, source).
  std::map<int, CopyGeom> deferred;
  std::map<int, int> deferred_src;
};

}  // namespace loom::compiler::cuda::plan_internal
