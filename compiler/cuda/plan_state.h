// Private to the CUDA plan (plan.h) and its tests: the state a PlanCuda call
// threads through its pipeline of passes (plan.cc lists them in order), the
// pass interface, the decisions the fusion passes leave for lower_nodes, and
// the helpers the passes share.
//
// The fusion passes only decide: each claims graph nodes for a launch headed
// by another node (covered_by), marks the values no launch will write
// (virtual_value: folded into an epilogue, or read through a strided view),
// and records what lower_nodes needs to emit the fused launch. lower_nodes
// then walks the graph once and emits one launch per uncovered node, in graph
// order, with the casts and bf16 shadows of the storage policy.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/cuda/plan.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::cuda::plan_internal {

// Per graph value: the node that writes it (-1 for graph inputs).
std::vector<int> Producers(const ir::Graph& g);
// Per graph value: the nodes that read it, in graph order, each once.
std::vector<std::vector<int>> Users(const ir::Graph& g);
// Contiguous element strides of `shape`.
std::vector<int64_t> Contig(absl::Span<const int64_t> shape);
int64_t NormAxis(int64_t axis, size_t rank);
// Unimplemented naming node's op: no CUDA launch for it (`why`).
absl::Status Unsupported(const ir::Graph& g, int node, absl::string_view why);

// A matmul's GEMM as gemm_epilogues decided it (the dtypes are lower_nodes').
struct GemmClaim {
  GemmPlan gemm;              // shape, batch strides, epilogue, weight_grad
  std::vector<int> nodes;     // the matmul, then the nodes folded into it
  std::vector<int> extra_in;  // the bias, or dgelu's x
  std::vector<int> outputs;   // D [, aux]
  std::string op;
};

// An sdpa / sdpa_backward launch on strided views (attention_views).
struct AttnClaim {
  LaunchKind kind = LaunchKind::kSdpa;
  std::string op;
  std::vector<int> nodes;     // the sdpa node, then the nodes its views replace
  std::vector<AttnView> views;  // Launch::attn
  std::vector<int> inputs, outputs;
  std::vector<std::pair<int, int>> roots;  // (value, root) set when it is emitted
};

// slice -> reshape -> permute as one strided copy (compose_copies).
struct SliceChain {
  int reshape = -1, permute = -1;
  CopyGeom geom;
};

struct PlanState {
  PlanState(const ir::Graph& graph, bool bf16, const PlanOptions& opts);

  int new_value(ir::TensorMeta m);      // a plan value past the graph's
  int want(int v, DType dt);            // v in storage dtype dt (shadow, bf16 copy or cast launch)
  int bf16_copy_of(int v);              // v's bf16 copy written with it (bf16_copy_at), or -1
  bool available_before(int v, int node) const { return prod[v] < node; }  // inputs: prod -1
  int single_user(int v) const;         // v's only reader (reading it once), or -1
  bool covered(int node) const { return covered_by[node] >= 0; }
  // Node `node` gets no launch of its own: launch `by` covers it (by == node:
  // it needs none, e.g. a permute read as a view).
  void Cover(int node, int by) { covered_by[node] = by; }
  // Whether a launch (or a graph input's buffer) will hold graph value v:
  // false for values folded away or read through a view by an earlier pass.
  bool materialized(int v) const { return !virtual_value[v]; }

  const ir::Graph& g;
  const PlanOptions& options;
  CudaPlan p;
  std::vector<DType> st;        // storage dtype of every graph value (storage_dtypes)
  std::vector<bool> is_shadow;  // per plan value
  std::vector<int> prod;
  std::vector<std::vector<int>> users;
  std::vector<bool> is_output;
  int nn = 0;               // graph nodes
  DType cdt = DType::kF32;  // GEMM compute dtype
  bool attn_views = false;  // options.attn_views under bf16

  // Decisions of the fusion passes, read by lower_nodes.
  std::vector<int> covered_by;      // per node: -1, or the node whose launch covers it
  std::vector<bool> virtual_value;  // per graph value
  std::map<int, GemmClaim> gemm;           // matmul node ->
  std::map<int, AttnClaim> attn;           // sdpa / sdpa_backward node ->
  std::map<int, AttnView> attn_view;       // value -> the window flash reads it through
  std::map<int, SliceChain> slice_chain;   // slice node ->
  std::map<int, CopyGeom> deferred;        // reshape output -> its copy into a later concat
  std::map<int, int> deferred_src;         // reshape output -> the value that copy reads
  std::map<int, int> residual_add;         // layernorm_backward node -> the add it folds
  std::map<int, int> add_layernorm;        // add (or fused adds) node -> its layernorm

  // Set by lower_nodes, read by want: an f32 value whose writing launch
  // can also write it in bf16 (value -> that launch's index), and the bf16
  // copies added to such launches (value -> its copy).
  std::map<int, int> bf16_copy_at;
  std::map<int, int> bf16_copy;
};

// One step of PlanCuda. Run returns whether it changed anything (a decision
// recorded, a launch emitted, an offset assigned).
class PlanPass {
 public:
  virtual ~PlanPass() = default;
  virtual absl::string_view name() const = 0;
  virtual absl::StatusOr<bool> Run(PlanState& s) = 0;
};

// The passes in order (plan.cc): the fusion passes the options turn on
// between storage_dtypes and lower_nodes.
std::vector<std::unique_ptr<PlanPass>> PlanPipeline(const PlanOptions& o);

}  // namespace loom::compiler::cuda::plan_internal
