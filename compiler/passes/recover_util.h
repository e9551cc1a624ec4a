// What the recovery passes (recover_*.h) share: a view of a graph's producers
// and uses, the values of its const inputs, and node insertion in place.
//
// Exported graphs arrive decomposed (attention as matmul/softmax/matmul,
// LayerNorm as mean/sub/pow/sqrt/div, GELU as erf or tanh arithmetic). Each
// recovery pass finds one such pattern and puts the registry's fused op in its
// place, so an imported model runs the kernels and fusions the built-in
// families use. Every pass
//   - walks the nodes from the last to the first (a pattern is taken at its
//     root, the outermost node), and re-indexes the graph after each rewrite;
//   - accepts an interior value only when the pattern is its one use (a value
//     used elsewhere must stay computed), and any constant only when it has
//     the value the fused op implies (SameConstant);
//   - inserts the new nodes at the root's position, moves the root's uses to the
//     new result, and erases the matched nodes left without uses (Commit);
//   - appends one line per match to its log, in graph order ("layernorm: ...").
//
//   ConstantTable consts = imported.initial;   // const inputs' values by name
//   MatchLog log;
//   RecoverAttention pass(&consts, &log);
//   LOOM_ASSIGN_OR_RETURN(bool changed, pass.Run(graph));
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::passes::recover {

// Values of a graph's const inputs (buffers, folded constants) by input name.
// The passes read masks and scalars from it and add the constants they make.
using ConstantTable = std::map<std::string, Tensor>;

// One line per match, in the order the passes found them.
using MatchLog = std::vector<std::string>;

// Producers and uses of one graph's values; stale after any change.
class GraphIndex {
 public:
  GraphIndex(const ir::Graph& g, const ConstantTable* consts);

  // The node producing v, or nullptr for a graph input.
  const ir::Node* Def(int v) const;
  // Def(v) when its op is `op` and v is its only output, else nullptr.
  const ir::Node* DefOp(int v, absl::string_view op) const;
  // Node inputs plus graph outputs reading v.
  int Uses(int v) const { return uses_[v]; }
  // The value of v when it is a const input found in the table.
  const Tensor* Constant(int v) const;
  // The element of a one-element constant.
  std::optional<double> Scalar(int v) const;
  // "%name" for a graph input; a node output by its type ("f32[2, 8, 96]").
  std::string Name(int v) const;

 private:
  const ir::Graph& g_;
  const ConstantTable* consts_;
  std::vector<int> producer_, uses_;
  std::vector<const ir::GraphInput*> input_of_;
};

// Operand matchers. Each looks at the node producing v and returns its
// operands when it has the form; a value it looks through below v must have
// no other use (v's own uses are the caller's to check).
struct Operand {
  int value = -1;   // the non-constant operand
  double c = 0;     // the constant
};
// v = u + c: add_scalar(u){s=c} or add(u, c) / add(c, u), c a one-element
// constant that leaves u's shape as it is.
std::optional<Operand> AddedScalar(const GraphIndex& idx, const ir::Graph& g, int v);
// v = u * c: scale(u){s=c}, mul(u, c) / mul(c, u), or div(u, k) with c = 1 / k.
std::optional<Operand> ScaledBy(const GraphIndex& idx, const ir::Graph& g, int v);
// v = x * x: pow_scalar(x){p=2}, mul(x, x) or pow(x, 2).
std::optional<int> SquareOf(const GraphIndex& idx, int v);
// v = 1 / sqrt(e): rsqrt(e), reciprocal(sqrt(e)) or div(1, sqrt(e)); returns e.
std::optional<int> InvSqrtOf(const GraphIndex& idx, int v);
// v = a * b (mul): the operand pair, in order.
std::optional<std::pair<int, int>> Product(const GraphIndex& idx, int v);

// Whether `got` is `want` up to an f32 constant's rounding (relative 2^-20).
bool SameConstant(double got, double want);

// The axis list of a reduction (mean/sum) normalised to [0, rank).
std::vector<int64_t> ReducedAxes(const ir::Node& n, size_t rank);

// Moves the nodes appended (Graph::AddOp) since `first_new` to position `at`, before the node
// they replace (their inputs come before it, their users after); they take
// that node's origin (ir::Node::origin).
void MoveAppended(ir::Graph& g, size_t first_new, int at);
// Erases the producers of `values` that have no use, then, transitively, the
// producers of their inputs left without one. Returns how many erased nodes
// stood before position `at`.
int EraseUnused(ir::Graph& g, const std::vector<int>& values, int at = 0);
// Puts a rewrite in place: moves the nodes appended since `first_new` to `at`
// (the replaced root's position), moves every use of `from` to `to` and
// erases what only `from` needed (EraseUnused). Returns the position of the
// first moved node afterwards.
int Commit(ir::Graph& g, size_t first_new, int at, int from, int to);
// Adds a const input named `base` (with "#2", "#3", ... when taken) holding
// `value`, records the value in the table and returns the input's value id.
int AddConstant(ir::Graph& g, ConstantTable& table, const std::string& base, Tensor value);

}  // namespace loom::compiler::passes::recover
