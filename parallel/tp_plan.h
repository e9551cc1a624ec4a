// Tensor parallelism for imported graphs: a plan by parameter-name patterns
// (parallel.tp_plan), in the spirit of PyTorch's parallelize_module.
//
//   parallel:
//     tp: 2
//     tp_plan: {"h.*.qkv.*": colwise, "h.*.proj.weight": rowwise, "wte.weight": vocab}
//
// Every parameter takes the style of the FIRST rule whose pattern matches its
// name (fnmatch without flags: `*` matches any run of characters, dots
// included, `?` one character, `[...]` a class, `\` escapes); parameters no
// rule matches are replicated. `loom inspect MODEL.onnx` lists the names.
//
// The styles say what is sharded, whatever layout the exporter stored the
// weight in; the dim is found from how the graph reads the parameter, through
// Transpose (permute) and Cast:
//
//   style      2-D weight read by matmul / Gemm      embedding table   1-D (bias)
//   colwise    the output features (N; M for an a    dim 1 (features)  dim 0
//              operand): W [out, in] -> dim 0,
//              W [in, out] -> dim 1
//   rowwise    the input features (K)                dim 0 (rows)      replicated
//   vocab      the output features of a tied head    dim 0 (rows)      refused
//   replicate  nothing                               nothing           nothing
//
// torch.onnx.export writes a 3-D Linear as MatMul(x, Transpose(W)) with W
// [out, in] (do_constant_folding=False: W keeps its state_dict name) or
// MatMul(x, W^T) with the transpose folded into an initializer named
// onnx::MatMul_N [in, out] (constant folding on); a 2-D Linear as
// Gemm(transB=1). colwise means the same in all three. A table read by an
// embedding lookup and by a head (tied weights) must use vocab (colwise would
// shard dim 1 for the lookup and dim 0 for the head: refused).
//
// Refused before launch, InvalidArgument naming parallel.tp_plan and the
// parameter:
//   - a pattern that matches no parameter, or only parameters an earlier
//     rule took;
//   - a dim that does not split evenly over tp, a scalar, a parameter no
//     matmul / embedding / gather reads (colwise, rowwise, vocab), uses that
//     disagree on the dim;
//   - (CheckTpPlanHonoured, after sharding propagation) a sharded parameter
//     that some op can only use whole: propagation would all-gather it over
//     tp at that op every step. The message names the op and its node in the
//     joint graph (`loom compile JOB.yaml --dump=joint`).
//
// ProposeTpAssignments is `tp: auto`'s proposal for a transformer graph:
// weight matmuls whose activation comes from a normalisation, an embedding
// or an input (q/k/v, fused qkv, MLP up and gate projections, the output
// head) are colwise; those whose activation comes, through attention or an
// activation function, from another weight matmul (attention out, MLP down)
// are rowwise; tables read by an embedding lookup are vocab; biases added to a
// colwise (or vocab) product are colwise; everything else, and anything whose
// dim does not split over tp, is replicated. styles.h's FitTpPlan then
// replicates whatever propagation cannot keep sharded.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/tensor.h"
#include "compiler/ir/ir.h"
#include "compiler/spmd/spmd.h"
#include "dtensor/spec.h"
#include "parallel/parallel_check.h"

namespace loom::parallel {

// What the plan makes of one parameter.
struct TpAssignment {
  std::string param;
  Shape shape;
  std::string style = "replicate";  // the rule's style; "replicate" when no rule matched
  std::string pattern;              // the rule that matched; "" when none did
  dtensor::Placement placement;     // along the tp mesh dim
};

// The parameters (graph inputs of kind param) of `forward`, in order, with
// the placement `plan` gives each for tensor parallelism of size `tp`.
absl::StatusOr<std::vector<TpAssignment>> ResolveTpPlan(const compiler::ir::Graph& forward,
                                                        const std::vector<TpRule>& plan, int tp);

// After propagation over the joint graph (stats from compiler::spmd::Parallelize):
// OK when no tp-sharded parameter of `plan` (or a Transpose / Cast of one)
// is redistributed away from its shard on mesh dim `tp_dim`; otherwise
// InvalidArgument naming the parameter, the op that needs it whole and its
// node in `joint`, and *param (when given) is set to the parameter's name.
absl::Status CheckTpPlanHonoured(const compiler::ir::Graph& joint, const compiler::spmd::SpmdStats& stats, int tp_dim,
                                 const std::vector<TpAssignment>& plan, std::string* param = nullptr);

// tp: auto's proposal (above), before propagation has checked it.
std::vector<TpAssignment> ProposeTpAssignments(const compiler::ir::Graph& forward, int tp);

// Rules that give every parameter the style of `a` under first-match
// semantics: per layer-indexed name family (digits between dots become `*`)
// when the whole family shares a style, else the exact (escaped) name.
// Replicated parameters get no rule.
std::vector<TpRule> RulesFor(const std::vector<TpAssignment>& a);

// One line per parameter: name, shape, style, placement over tp, rule.
std::string FormatTpAssignments(const std::vector<TpAssignment>& a);
// The rules as the YAML the job spec takes: {"h.*.qkv.weight": colwise, ...}.
std::string FormatTpRules(const std::vector<TpRule>& rules);

}  // namespace loom::parallel
