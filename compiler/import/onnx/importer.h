// ONNX import: an ONNX model (opsets 7 to 17) becomes a Loom forward graph.
//
//   ImportOptions o;
//   o.dims = {{"batch", 8}, {"sequence", 256}};        // symbolic dims
//   LOOM_ASSIGN_OR_RETURN(ImportedModel m, ImportModel("model.onnx", o));
//   // m.graph: inputs = parameters (param), buffers (const), data inputs;
//   //          outputs = the ONNX graph's outputs, in order.
//   // m.initial: initial values of the parameters and buffers, by name.
//
// What happens:
//   1. The file is read with a bounded parser (the file's size is the limit;
//      nothing larger than max_model_bytes is read), then checked: opset,
//      every node input defined, no cycles, no duplicate names, every dim
//      and element count within limits, external data inside the allowed
//      roots. Bad input is InvalidArgument naming what is wrong.
//   2. Initializers keep their ONNX names. Parameters (trainable) versus
//      buffers (constant): the model's metadata key "loom.parameters" (a
//      comma-separated list of initializer names) decides when present;
//      otherwise a floating initializer is a parameter when a differentiable
//      path leads from it to the first output through a node with a
//      run-time (data-dependent) operand (params.h). report.param_rule says
//      which rule decided.
//   3. Graph inputs that are not initializers are data inputs; their shapes
//      come from input_shapes, else default_input_shape (same rank), else
//      the model with dim_params bound by `dims` (a first dim also by
//      `batch`). Every shape is then static.
//   4. Nodes are converted in topological order through the op table
//      (op_table.h); constant operands fold at import (builder.h). Errors
//      name the node: "node 'NAME' (OpType, opset N): reason".
//   5. ONNX's own shape inference cross-checks the result: a static shape it
//      infers that differs from Loom's is an error naming the value.
//   6. The recovery passes (compiler/passes/recover.h) put the fused ops back
//      where the exporter wrote them out: attention -> sdpa, LayerNorm and
//      RMSNorm -> layernorm / rmsnorm, GELU -> gelu, transposed weights ->
//      matmul{trans_b}, position lookups -> the table. report.patterns lists
//      every match; const inputs nothing reads any more (a causal mask) are
//      dropped from the graph, buffers and initial. Parameters keep their
//      names and shapes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/tensor.h"
#include "compiler/ir/ir.h"

namespace loom::compiler::import::onnx {

struct ImportOptions {
  // Concrete shapes of data inputs by name (override the model's dims).
  std::map<std::string, Shape> input_shapes;
  // The shape of any other data input whose declared rank matches it (a
  // language model's ids, labels and masks are all [batch, seq_len]).
  std::optional<Shape> default_input_shape;
  // Sizes of symbolic dims (ONNX dim_param), e.g. {"batch", 8}.
  std::map<std::string, int64_t> dims;
  // > 0: the size of a data input's symbolic first dim that `dims` does not
  // bind, whatever its name (the batch; exporters name it freely).
  int64_t batch = 0;
  // Values of data inputs the importer may use where an op needs a value at
  // import time (Reshape's shape, Dropout's ratio, Range's limits): such an
  // input becomes a constant. Inputs not needed that way stay data inputs.
  std::map<std::string, Tensor> input_values;
  // Folders external data may be read from (resolved with realpath, symlinks
  // followed); empty: the model's own folder.
  std::vector<std::string> allowed_roots;
  // ImportModelBytes: the folder external data locations resolve against
  // (empty: external data is refused).
  std::string base_dir;
  // Limits against hostile files.
  int64_t max_model_bytes = int64_t{2} << 30;   // protobuf's own ceiling
  int64_t max_elements = int64_t{1} << 33;      // any one tensor or value
  int max_nodes = 1 << 20;
  // Cross-check shapes with ONNX's shape inference (step 5).
  bool onnx_shape_check = true;
  // Run the recovery passes (step 6); false: the graph as converted.
  bool recover_patterns = true;
};

enum class ParamRule { kMetadata, kReachability };

struct ImportReport {
  int opset = 0;
  std::string producer;                 // "pytorch 1.13.1"
  ParamRule param_rule = ParamRule::kReachability;
  std::map<std::string, int> op_counts;  // ONNX op type -> nodes in the model
  int onnx_nodes = 0;
  int folded_ops = 0;                    // registry ops evaluated at import
  int graph_nodes = 0;                   // nodes of the Loom graph
  int shape_checked = 0;                 // values ONNX shape inference agreed on
  std::vector<std::string> constant_inputs;  // data inputs bound from input_values
  bool recovered = false;                // the recovery passes ran (ImportOptions::recover_patterns)
  std::vector<std::string> patterns;     // one line per recovery match, e.g. "gelu: tanh form -> ..."
  int converted_nodes = 0;               // nodes before the recovery passes
};

struct ImportedModel {
  ir::Graph graph;
  std::vector<std::string> params;       // parameter inputs, in graph order
  std::vector<std::string> buffers;      // const inputs (buffer initializers and folded constants)
  std::vector<std::string> data_inputs;  // inputs fed per step
  std::vector<std::string> outputs;      // ONNX output names, in graph output order
  std::map<std::string, Tensor> initial;  // values of params and buffers
  ImportReport report;
  int64_t NumParameters() const;
};

absl::StatusOr<ImportedModel> ImportModel(const std::string& path, const ImportOptions& options = {});
absl::StatusOr<ImportedModel> ImportModelBytes(absl::string_view bytes, const ImportOptions& options = {});

}  // namespace loom::compiler::import::onnx
