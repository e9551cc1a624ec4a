#include "compiler/import/onnx/training.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::compiler::import::onnx {
namespace {

struct Roles {
  std::string tokens, labels;
};

DType InputDType(const ImportedModel& m, const std::string& name) {
  return m.graph.meta(m.graph.inputs()[m.graph.FindInput(name)].value).dtype;
}

// The data input x feeds when the options name none: the only data input
// besides the label input, else the only integer one.
absl::StatusOr<std::string> DefaultTokenInput(const ImportedModel& m, const std::string& labels) {
  std::vector<std::string> all, ints;
  for (const std::string& name : m.data_inputs) {
    if (name == labels) continue;
    all.push_back(name);
    const DType dt = InputDType(m, name);
    if (dt == DType::kI32 || dt == DType::kI64) ints.push_back(name);
  }
  if (all.size() == 1) return all[0];
  if (ints.size() == 1) return ints[0];
  return absl::InvalidArgumentError(absl::StrCat("the model has ", all.size(), " data inputs (", absl::StrJoin(all, ", "),
                                                 ") and ", ints.size(), " integer ones; name the token input"));
}

absl::StatusOr<Roles> AssignRoles(const ImportedModel& m, const TrainingGraphOptions& o) {
  Roles r;
  if (o.target != kShiftedInputs) r.labels = o.target;
  r.tokens = o.token_input;
  if (r.tokens.empty()) {
    LOOM_ASSIGN_OR_RETURN(r.tokens, DefaultTokenInput(m, r.labels));
  }
  for (const std::string* name : {&r.tokens, &r.labels})
    if (!name->empty() && std::find(m.data_inputs.begin(), m.data_inputs.end(), *name) == m.data_inputs.end())
      return absl::InvalidArgumentError(absl::StrCat("'", *name, "' is not a data input of the model (data inputs: ",
                                                     absl::StrJoin(m.data_inputs, ", "), ")"));
  for (const std::string& name : m.data_inputs)
    if (name != r.tokens && name != r.labels)
      return absl::InvalidArgumentError(absl::StrCat("data input '", name, "' has no source: the trainer feeds the "
                                                     "batch's inputs and targets only"));
  for (const char* reserved : {"x", "y", "lr", "step", kDropoutStep})
    if (m.graph.FindInput(reserved) >= 0 && reserved != r.tokens && reserved != r.labels)
      return absl::InvalidArgumentError(absl::StrCat("the model has an input named '", reserved, "', a name the trainer uses"));
  return r;
}

// Whether every use of value v in src is the index operand of an embedding
// or gather (which read i32 and i64 indices alike).
bool OnlyIndexes(const ir::Graph& src, int v) {
  for (const ir::GraphOutput& o : src.outputs())
    if (o.value == v) return false;
  for (const ir::Node& n : src.nodes())
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] == v && !(k == 1 && (n.op == "embedding" || n.op == "gather"))) return false;
  return true;
}

// The trainer's input for a model input of `need`: its shape, i32 for
// integer inputs and f32 for floating ones.
ir::TensorMeta FedMeta(const ir::TensorMeta& need) {
  return ir::TensorMeta{IsFloating(need.dtype) ? DType::kF32 : DType::kI32, need.shape};
}

// x or y, as the data input of the model needs it: its dtype, or the i32 the
// trainer feeds when the model only looks rows up with an i64 input.
absl::StatusOr<int> Feed(ir::Graph& g, int fed, const ir::TensorMeta& need, bool index_only) {
  if (need.dtype == g.meta(fed).dtype) return fed;
  if (index_only && need.dtype == DType::kI64 && g.meta(fed).dtype == DType::kI32) return fed;
  return g.AddOp1("cast", {fed}, ir::Attrs{{"dtype", std::string(DTypeName(need.dtype))}});
}

// The logits as [rows, classes] (from [..., classes]).
absl::StatusOr<int> Logits2D(ir::Graph& g, int logits, int64_t vocab_expected) {
  const Shape& s = g.meta(logits).shape;
  if (s.size() < 2 || !IsFloating(g.meta(logits).dtype))
    return absl::InvalidArgumentError(absl::StrCat("the model's first output ", g.meta(logits).ToString(),
                                                   " is neither a scalar loss nor logits [..., classes]"));
  if (vocab_expected > 0 && s.back() != vocab_expected)
    return absl::InvalidArgumentError(absl::StrCat("model.vocab: ", vocab_expected, " does not match the model's logits (",
                                                   s.back(), " classes)"));
  if (s.size() == 2) return logits;
  return g.AddOp1("reshape", {logits}, ir::Attrs{{"shape", std::vector<int64_t>{NumElements(s) / s.back(), s.back()}}});
}

// The shape of y for a loss over `logits` (see the top of training.h).
Shape TargetShape(const ir::TensorMeta& x, const Shape& logits) {
  const int64_t rows = NumElements(logits) / logits.back();
  if (!IsFloating(x.dtype) && NumElements(x.shape) == rows) return x.shape;
  return Shape(logits.begin(), logits.end() - 1);
}

}  // namespace

// Copies the model's nodes into `g` (vmap: model value -> g value); dropout
// as training.h says.
absl::Status CopyNodes(const ir::Graph& src, ir::Graph& g, bool evaluation, std::map<int, int>& vmap) {
  int dropout_step = -1;
  for (const ir::Node& n : src.nodes()) {
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(vmap.at(v));
    if (n.op == "dropout" && evaluation) {
      vmap[n.outputs[0]] = ins[0];
      continue;
    }
    if (n.op == "dropout" && ins.size() == 1) {  // training: a fresh mask each step
      if (dropout_step < 0) dropout_step = g.AddInput(kDropoutStep, {DType::kF32, {}});
      ins.push_back(dropout_step);
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<int> outs, g.AddOp(n.op, ins, n.attrs));
    g.mutable_nodes().back().origin = n.origin;
    for (size_t k = 0; k < outs.size(); ++k) vmap[n.outputs[k]] = outs[k];
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const ImportedModel& m, const TrainingGraphOptions& o) {
  LOOM_ASSIGN_OR_RETURN(Roles roles, AssignRoles(m, o));
  const ir::Graph& src = m.graph;
  if (src.outputs().empty()) return absl::InvalidArgumentError("the model has no outputs");
  const int tok_value = src.inputs()[src.FindInput(roles.tokens)].value;
  const ir::TensorMeta tok = src.meta(tok_value);
  TrainingGraph out;
  ir::Graph& g = out.graph;
  g.set_name(src.name());
  std::map<int, int> vmap;
  for (const ir::GraphInput& in : src.inputs())
    if (in.kind != ir::InputKind::kInput) vmap[in.value] = g.AddInput(in.name, src.meta(in.value), in.kind);
  const ir::TensorMeta first_meta = src.meta(src.outputs()[0].value);
  const bool model_loss = first_meta.shape.empty() && o.loss_kind != "cross_entropy";
  const int x = g.AddInput("x", FedMeta(tok));
  LOOM_ASSIGN_OR_RETURN(vmap[tok_value], Feed(g, x, tok, OnlyIndexes(src, tok_value)));
  int y = -1;
  if (!roles.labels.empty()) {
    const int lv = src.inputs()[src.FindInput(roles.labels)].value;
    y = g.AddInput("y", FedMeta(src.meta(lv)));
    LOOM_ASSIGN_OR_RETURN(vmap[lv], Feed(g, y, src.meta(lv), OnlyIndexes(src, lv)));
  } else {  // a model computing its own loss without labels is still fed y (unused)
    const bool logits = !model_loss && first_meta.shape.size() >= 2;
    y = g.AddInput("y", {DType::kI32, logits ? TargetShape(tok, first_meta.shape) : tok.shape});
  }
  LOOM_RETURN_IF_ERROR(CopyNodes(src, g, o.return_logits, vmap));
  const int first = vmap.at(src.outputs()[0].value);
  int loss = -1, logits = -1;
  if (model_loss) {
    out.model_loss = true;
    loss = first;
    if (src.outputs().size() > 1) {
      auto l = Logits2D(g, vmap.at(src.outputs()[1].value), o.vocab);
      if (l.ok()) logits = *l;
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(logits, Logits2D(g, first, o.vocab));
    const int target = roles.labels.empty() ? y : vmap.at(src.inputs()[src.FindInput(roles.labels)].value);
    const int64_t rows = g.meta(logits).shape[0];
    if (NumElements(g.meta(target).shape) != rows)
      return absl::InvalidArgumentError(absl::StrCat("the targets ", g.meta(target).ToString(), " do not hold one class per "
                                                     "row of the logits ", g.meta(logits).ToString()));
    LOOM_ASSIGN_OR_RETURN(int t1, g.AddOp1("reshape", {target}, ir::Attrs{{"shape", std::vector<int64_t>{rows}}}));
    LOOM_ASSIGN_OR_RETURN(std::vector<int> ce,
                          g.AddOp("cross_entropy", {logits, t1}, ir::Attrs{{"ignore_index", o.ignore_index}}));
    loss = ce[0];
  }
  if (!IsFloating(g.meta(loss).dtype)) return absl::InvalidArgumentError("the model's loss is not floating");
  if (g.meta(loss).dtype != DType::kF32) {
    LOOM_ASSIGN_OR_RETURN(loss, g.AddOp1("cast", {loss}, ir::Attrs{{"dtype", std::string("f32")}}));
  }
  g.AddOutput(loss);
  if (o.return_logits && logits >= 0) {
    g.AddOutput(logits);
    out.has_logits = true;
  }
  return out;
}

}  // namespace loom::compiler::import::onnx
