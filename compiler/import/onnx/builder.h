// The importer's working state: the ONNX value table, the Loom graph being
// built, and constant folding.
//
// Every ONNX value becomes a Val: either a constant known at import time (a
// Constant node, a buffer initializer, a Shape of a static value, or anything
// computed from those only) or a value of the graph (a parameter, a data input,
// or the output of a node that depends on one of them).
//
// Converters (one per ONNX op, in the family files) build through
// Builder::Emit, which folds: when every operand of a registry op is a
// constant, the op runs at once through the registry's f64-capable reference
// kernel (kernels::RunOp with Impl::kReference) and its results are constants;
// otherwise it becomes a graph node, and any constant operand becomes a graph
// input of kind const (InputKind::kConst), named after its ONNX value.
//
//   NodeCtx& n = ...;                          // one ONNX node
//   LOOM_ASSIGN_OR_RETURN(Val a, n.In(0));
//   LOOM_ASSIGN_OR_RETURN(Val y, n.Emit1("neg", {a}));
//   return n.SetOut(0, y);
//
// Errors a converter returns are InvalidArgument; NodeCtx::Error prefixes them
// with "node 'NAME' (OpType, opset N): ".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "compiler/import/onnx/tensor_proto.h"
#include "compiler/ir/ir.h"
#include "onnx/onnx_pb.h"

namespace loom::compiler::import::onnx {

struct Val {
  ir::TensorMeta meta;
  int id = -1;       // graph value id; -1 for a constant not yet used by the graph
  Tensor value;      // defined for a constant
  std::string name;  // the ONNX value name (or a converter's hint): names its const input
  bool is_const() const { return value.defined(); }
};

struct BuilderLimits {
  // Largest tensor the importer will create, fold or accept as a value shape.
  int64_t max_elements = int64_t{1} << 33;
  // Folding stops here: larger results stay graph nodes over const inputs.
  int64_t max_fold_elements = int64_t{1} << 26;
};

class Builder {
 public:
  Builder(ir::Graph& g, BuilderLimits limits, TensorReadOptions read)
      : g_(g), limits_(limits), read_(std::move(read)) {}

  ir::Graph& graph() { return g_; }
  const BuilderLimits& limits() const { return limits_; }
  // How tensors inside the model (Constant values) are read.
  const TensorReadOptions& read_options() const { return read_; }

  // Registry op `op` over `ins`: folded when every input is a constant (and
  // the op is deterministic), else a graph node.
  absl::StatusOr<std::vector<Val>> Emit(absl::string_view op, const std::vector<Val>& ins, const ir::Attrs& attrs = {});
  absl::StatusOr<Val> Emit1(absl::string_view op, const std::vector<Val>& ins, const ir::Attrs& attrs = {});

  // The graph value of `v`: for a constant, a const input named after
  // v.name (made unique), shared by every use of the same constant.
  int Materialize(const Val& v);
  // Whether `v` is a parameter input of the graph.
  bool IsParam(const Val& v) const;
  // A graph input (parameter, data input or const) under `name`, made unique.
  int AddInput(const std::string& name, ir::TensorMeta meta, ir::InputKind kind);
  // A name no graph input has yet: `base`, else "base#2", "base#3", ...
  std::string UniqueName(const std::string& base);

  // ONNX value table.
  bool Has(const std::string& name) const { return vals_.count(name) > 0; }
  Val* Find(const std::string& name);
  absl::Status Define(const std::string& name, Val v);

  // Values of the const inputs the graph has (for ImportedModel).
  const std::map<std::string, Tensor>& const_inputs() const { return consts_; }
  int folded_ops() const { return folded_; }
  // The ONNX value a converter needed as a constant but found computed at
  // run time (ConstIn's failure), for the importer's retry with input values.
  const std::string& needs_value() const { return needs_value_; }
  void set_needs_value(const std::string& name) { needs_value_ = name; }

 private:
  ir::Graph& g_;
  BuilderLimits limits_;
  TensorReadOptions read_;
  std::map<std::string, Val> vals_;
  std::map<std::string, Tensor> consts_;
  std::map<std::string, int> used_names_;
  // (storage, offset, meta) of each materialized constant -> its input value id
  std::map<std::tuple<const void*, int64_t, std::string>, int> const_ids_;
  std::string needs_value_;
  int folded_ = 0;
};

// One ONNX node being converted.
class NodeCtx {
 public:
  NodeCtx(Builder& b, const ::onnx::NodeProto& node, int index, int opset, const std::string& display)
      : b_(b), node_(node), index_(index), opset_(opset), display_(display) {}

  Builder& builder() { return b_; }
  const ::onnx::NodeProto& node() const { return node_; }
  int opset() const { return opset_; }
  // "node 'NAME' (OpType, opset N)"
  const std::string& display() const { return display_; }

  // ---- Inputs -------------------------------------------------------------
  int NumInputs() const { return node_.input_size(); }
  bool HasInput(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  const std::string& InputName(int i) const { return node_.input(i); }
  absl::StatusOr<Val> In(int i);
  // The constant value of input i; an error naming `what` when the input is
  // computed from data at run time.
  absl::StatusOr<Tensor> ConstIn(int i, absl::string_view what);
  absl::StatusOr<std::vector<int64_t>> ConstInts(int i, absl::string_view what);
  absl::StatusOr<double> ConstScalar(int i, absl::string_view what);

  // ---- Attributes ---------------------------------------------------------
  const ::onnx::AttributeProto* Attr(absl::string_view name) const;
  bool HasAttr(absl::string_view name) const { return Attr(name) != nullptr; }
  absl::StatusOr<int64_t> AttrInt(absl::string_view name, int64_t def) const;
  absl::StatusOr<double> AttrFloat(absl::string_view name, double def) const;
  absl::StatusOr<std::vector<int64_t>> AttrInts(absl::string_view name) const;  // empty when absent
  absl::StatusOr<std::string> AttrString(absl::string_view name, const std::string& def) const;
  // Fails naming any attribute outside `known`.
  absl::Status OnlyAttrs(std::initializer_list<absl::string_view> known) const;

  // ---- Outputs ------------------------------------------------------------
  int NumOutputs() const { return node_.output_size(); }
  bool WantsOutput(int i) const { return i < node_.output_size() && !node_.output(i).empty(); }
  absl::Status SetOut(int i, Val v);

  // ---- Building -----------------------------------------------------------
  absl::StatusOr<std::vector<Val>> Emit(absl::string_view op, const std::vector<Val>& ins, const ir::Attrs& attrs = {});
  absl::StatusOr<Val> Emit1(absl::string_view op, const std::vector<Val>& ins, const ir::Attrs& attrs = {});
  // A constant operand built by the converter (a mask, an index table).
  Val Const(Tensor t) const;
  absl::StatusOr<Val> Scalar(double v, DType dtype) const;

  // InvalidArgument "node 'NAME' (OpType, opset N): <reason>".
  absl::Status Error(absl::string_view reason) const;
  absl::Status Check(bool ok, absl::string_view reason) const { return ok ? absl::OkStatus() : Error(reason); }

 private:
  Builder& b_;
  const ::onnx::NodeProto& node_;
  int index_;
  int opset_;
  std::string display_;
};

// ---- Shared helpers for converters ----------------------------------------
// Normalizes an axis against `rank` (negatives count from the end); the error
// names `what`.
absl::StatusOr<int> NormAxis(const NodeCtx& n, int64_t axis, int rank, absl::string_view what);
// The int64 vector view of an integer tensor (i32 / i64 / bool).
std::vector<int64_t> ToInts(const Tensor& t);
// Shape as the int64 list attributes take.
std::vector<int64_t> ShapeVec(const Shape& s);
// A host tensor from int64 values in `dtype`.
Tensor IntTensor(const std::vector<int64_t>& values, absl::Span<const int64_t> shape, DType dtype);

}  // namespace loom::compiler::import::onnx
