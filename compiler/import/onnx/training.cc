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

absl::StatusOr<Roles> AssignRoles(const ImportedModel& m, const TrainingGraphOptions& o) {
  Roles r;
  if (o.target != kShiftedInputs) r.labels = o.target;
  std::vector<std::string> ints;
  for (const std::string& name : m.data_inputs) {
    const DType dt = m.graph.meta(m.graph.inputs()[m.graph.FindInput(name)].value).dtype;
    if ((dt == DType::kI32 || dt == DType::kI64) && name != r.labels) ints.push_back(name);
  }
  r.tokens = o.token_input;
  if (r.tokens.empty()) {
    if (ints.size() != 1)
      return absl::InvalidArgumentError(absl::StrCat("the model has ", ints.size(), " integer data inputs (",
                                                     absl::StrJoin(ints, ", "), "); name the token input"));
    r.tokens = ints[0];
  }
  for (const std::string* name : {&r.tokens, &r.labels})
    if (!name->empty() && std::find(m.data_inputs.begin(), m.data_inputs.end(), *name) == m.data_inputs.end())
      return absl::InvalidArgumentError(absl::StrCat("'", *name, "' is not a data input of the model (data inputs: ",
                                                     absl::StrJoin(m.data_inputs, ", "), ")"));
  for (const std::string& name : m.data_inputs)
    if (name != r.tokens && name != r.labels)
      return absl::InvalidArgumentError(absl::StrCat("data input '", name, "' has no source: the trainer feeds token ids "
                                                     "and their targets only"));
  for (const char* reserved : {"x", "y", "lr", "step", kDropoutStep})
    if (m.graph.FindInput(reserved) >= 0 && reserved != r.tokens && reserved != r.labels)
      return absl::InvalidArgumentError(absl::StrCat("the model has an input named '", reserved, "', a name the trainer uses"));
  return r;
}

// Whether every use of value v in src is the index operand of an embedding
// or gather (which read i32 and i64 indices alike).
bool OnlyIndexes(const Graph& src, int v) {
  for (const GraphOutput& o : src.outputs())
    if (o.value == v) return false;
  for (const Node& n : src.nodes())
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] == v && !(k == 1 && (n.op == "embedding" || n.op == "gather"))) return false;
  return true;
}

// x or y, as the data input `name` of the model needs it: its dtype, or the
// i32 the trainer feeds when the model only looks rows up with it.
absl::StatusOr<int> Feed(Graph& g, int fed, const TensorMeta& need, const std::string& name, bool index_only) {
  if (g.meta(fed).shape != need.shape)
    return absl::InvalidArgumentError(absl::StrCat("data input '", name, "' is ", need.ToString(),
                                                   ", the trainer feeds [batch, seq_len] = ",
                                                   ShapeToString(g.meta(fed).shape)));
  if (need.dtype == DType::kI32 || (index_only && need.dtype == DType::kI64)) return fed;
  return g.AddOp1("cast", {fed}, Attrs{{"dtype", std::string(DTypeName(need.dtype))}});
}

// The logits as [rows, vocab] (from [batch, seq, vocab] or [rows, vocab]).
absl::StatusOr<int> Logits2D(Graph& g, int logits, int64_t rows, int64_t vocab_expected) {
  const Shape& s = g.meta(logits).shape;
  if (s.size() < 2 || !IsFloating(g.meta(logits).dtype) || NumElements(s) != rows * s.back())
    return absl::InvalidArgumentError(absl::StrCat("the model's first output ", g.meta(logits).ToString(),
                                                   " is neither a scalar loss nor logits for ", rows, " positions"));
  if (vocab_expected > 0 && s.back() != vocab_expected)
    return absl::InvalidArgumentError(absl::StrCat("model.vocab: ", vocab_expected, " does not match the model's logits (",
                                                   s.back(), " classes)"));
  if (s.size() == 2) return logits;
  return g.AddOp1("reshape", {logits}, Attrs{{"shape", std::vector<int64_t>{rows, s.back()}}});
}

}  // namespace

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const ImportedModel& m, const TrainingGraphOptions& o) {
  LOOM_ASSIGN_OR_RETURN(Roles roles, AssignRoles(m, o));
  const Graph& src = m.graph;
  const TensorMeta tok = src.meta(src.inputs()[src.FindInput(roles.tokens)].value);
  if (tok.shape.size() != 2) return absl::InvalidArgumentError(absl::StrCat("token input '", roles.tokens, "' is ", tok.ToString(), ", not [batch, seq_len]"));
  TrainingGraph out;
  Graph& g = out.graph;
  g.set_name(src.name());
  std::map<int, int> vmap;
  for (const GraphInput& in : src.inputs())
    if (in.kind != InputKind::kInput) vmap[in.value] = g.AddInput(in.name, src.meta(in.value), in.kind);
  const int x = g.AddInput("x", {DType::kI32, tok.shape}), y = g.AddInput("y", {DType::kI32, tok.shape});
  const int tv = src.inputs()[src.FindInput(roles.tokens)].value;
  LOOM_ASSIGN_OR_RETURN(vmap[tv], Feed(g, x, tok, roles.tokens, OnlyIndexes(src, tv)));
  if (!roles.labels.empty()) {
    const int lv = src.inputs()[src.FindInput(roles.labels)].value;
    LOOM_ASSIGN_OR_RETURN(vmap[lv], Feed(g, y, src.meta(lv), roles.labels, OnlyIndexes(src, lv)));
  }
  int dropout_step = -1;
  for (const Node& n : src.nodes()) {
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(vmap.at(v));
    if (n.op == "dropout" && o.return_logits) {  // evaluation: no dropout
      vmap[n.outputs[0]] = ins[0];
      continue;
    }
    if (n.op == "dropout" && ins.size() == 1) {  // training: a fresh mask each step
      if (dropout_step < 0) dropout_step = g.AddInput(kDropoutStep, {DType::kF32, {}});
      ins.push_back(dropout_step);
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<int> outs, g.AddOp(n.op, ins, n.attrs));
    for (size_t k = 0; k < outs.size(); ++k) vmap[n.outputs[k]] = outs[k];
  }
  if (src.outputs().empty()) return absl::InvalidArgumentError("the model has no outputs");
  const int first = vmap.at(src.outputs()[0].value);
  const int64_t rows = tok.shape[0] * tok.shape[1];
  int loss = -1, logits = -1;
  if (g.meta(first).shape.empty() && o.loss_kind != "cross_entropy") {
    out.model_loss = true;
    loss = first;
    if (src.outputs().size() > 1) {
      auto l = Logits2D(g, vmap.at(src.outputs()[1].value), rows, o.vocab);
      if (l.ok()) logits = *l;
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(logits, Logits2D(g, first, rows, o.vocab));
    const int target = roles.labels.empty() ? y : vmap.at(src.inputs()[src.FindInput(roles.labels)].value);
    LOOM_ASSIGN_OR_RETURN(int t1, g.AddOp1("reshape", {target}, Attrs{{"shape", std::vector<int64_t>{rows}}}));
    LOOM_ASSIGN_OR_RETURN(std::vector<int> ce, g.AddOp("cross_entropy", {logits, t1}, Attrs{{"ignore_index", o.ignore_index}}));
    loss = ce[0];
  }
  if (!IsFloating(g.meta(loss).dtype)) return absl::InvalidArgumentError("the model's loss is not floating");
  if (g.meta(loss).dtype != DType::kF32) {
    LOOM_ASSIGN_OR_RETURN(loss, g.AddOp1("cast", {loss}, Attrs{{"dtype", std::string("f32")}}));
  }
  g.AddOutput(loss);
  if (o.return_logits && logits >= 0) {
    g.AddOutput(logits);
    out.has_logits = true;
  }
  return out;
}

}  // namespace loom::compiler::import::onnx
