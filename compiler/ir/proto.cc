#include "compiler/ir/proto.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler::ir {
namespace {

void SetType(const Value& v, loom::v1::TensorType* t) {
  t->set_dtype(std::string(DTypeName(v.meta.dtype)));
  for (int64_t d : v.meta.shape) t->add_shape(d);
  t->set_placement(v.placement);
}

absl::StatusOr<Value> GetType(const loom::v1::TensorType& t, absl::string_view what) {
  Value v;
  auto dt = ParseDType(t.dtype());
  if (!dt.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": unknown dtype '", t.dtype(), "'"));
  v.meta.dtype = *dt;
  for (int64_t d : t.shape()) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dimension"));
    v.meta.shape.push_back(d);
  }
  v.placement = t.placement();
  return v;
}

struct AttrToProto {
  loom::v1::AttrValue* p;
  void operator()(int64_t v) const { p->set_i(v); }
  void operator()(double v) const { p->set_f(v); }
  void operator()(bool v) const { p->set_b(v); }
  void operator()(const std::string& v) const { p->set_s(v); }
  void operator()(const std::vector<int64_t>& v) const {
    auto* l = p->mutable_ints();
    for (int64_t x : v) l->add_values(x);
  }
};

void ToProto(const Graph& g, loom::v1::GraphDef* def) {
  def->set_name(g.name());
  std::map<int, int> num;
  int next = 0;
  for (const GraphInput& in : g.inputs()) {
    num[in.value] = next++;
    auto* p = def->add_inputs();
    p->set_name(in.name);
    SetType(g.value(in.value), p->mutable_type());
    p->set_kind(in.kind == InputKind::kParam   ? loom::v1::GraphInputDef::PARAM
                : in.kind == InputKind::kState ? loom::v1::GraphInputDef::STATE
                : in.kind == InputKind::kConst ? loom::v1::GraphInputDef::CONST
                                               : loom::v1::GraphInputDef::INPUT);
  }
  for (const Node& n : g.nodes()) {
    auto* p = def->add_nodes();
    p->set_op(n.op);
    for (int v : n.inputs) p->add_inputs(num.count(v) ? num[v] : -1);
    for (const auto& [k, v] : n.attrs.values()) absl::visit(AttrToProto{&(*p->mutable_attrs())[k]}, v);
    for (int v : n.outputs) {
      num[v] = next++;
      SetType(g.value(v), p->add_outputs());
    }
    if (n.compute_dtype) p->set_compute_dtype(std::string(DTypeName(*n.compute_dtype)));
    if (n.subgraph) ToProto(*n.subgraph, p->mutable_subgraph());
  }
  for (const GraphOutput& o : g.outputs()) {
    auto* p = def->add_outputs();
    p->set_value(num.count(o.value) ? num[o.value] : -1);
    p->set_updates(o.updates);
  }
}

absl::StatusOr<Graph> FromProto(const loom::v1::GraphDef& def) {
  Graph g(def.name());
  std::vector<int> ids;  // value number -> value id
  for (int i = 0; i < def.inputs_size(); ++i) {
    const auto& in = def.inputs(i);
    LOOM_ASSIGN_OR_RETURN(Value v, GetType(in.type(), absl::StrCat("input ", in.name())));
    InputKind kind = in.kind() == loom::v1::GraphInputDef::PARAM   ? InputKind::kParam
                     : in.kind() == loom::v1::GraphInputDef::STATE ? InputKind::kState
                     : in.kind() == loom::v1::GraphInputDef::CONST ? InputKind::kConst
                                                                   : InputKind::kInput;
    int id = g.AddInput(in.name(), v.meta, kind);
    g.value(id).placement = v.placement;
    ids.push_back(id);
  }
  for (int i = 0; i < def.nodes_size(); ++i) {
    const auto& p = def.nodes(i);
    const std::string where = absl::StrCat("graph @", def.name(), ": node ", i, " (", p.op(), ")");
    Node n;
    n.op = p.op();
    for (int v : p.inputs()) {
      if (v < 0 || v >= static_cast<int>(ids.size()))
        return absl::InvalidArgumentError(absl::StrCat(where, ": input value ", v, " is not defined before"));
      n.inputs.push_back(ids[v]);
    }
    for (const auto& [k, a] : p.attrs()) {
      switch (a.value_case()) {
        case loom::v1::AttrValue::kI: n.attrs.Set(k, a.i()); break;
        case loom::v1::AttrValue::kF: n.attrs.Set(k, a.f()); break;
        case loom::v1::AttrValue::kB: n.attrs.Set(k, a.b()); break;
        case loom::v1::AttrValue::kS: n.attrs.Set(k, a.s()); break;
        case loom::v1::AttrValue::kInts:
          n.attrs.Set(k, std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end()));
          break;
        default: return absl::InvalidArgumentError(absl::StrCat(where, ": attribute '", k, "' has no value"));
      }
    }
    if (!p.compute_dtype().empty()) {
      auto dt = ParseDType(p.compute_dtype());
      if (!dt.ok())
        return absl::InvalidArgumentError(absl::StrCat(where, ": unknown compute dtype '", p.compute_dtype(), "'"));
      n.compute_dtype = *dt;
    }
    if (p.has_subgraph()) {
      auto sub = FromProto(p.subgraph());
      if (!sub.ok()) return Annotate(sub.status(), where);
      n.subgraph = std::make_shared<Graph>(std::move(*sub));
    }
    std::vector<TensorMeta> metas;
    std::vector<std::string> placements;
    for (int k = 0; k < p.outputs_size(); ++k) {
      LOOM_ASSIGN_OR_RETURN(Value v, GetType(p.outputs(k), absl::StrCat(where, ": output ", k)));
      metas.push_back(v.meta);
      placements.push_back(v.placement);
    }
    int idx = g.AddNodeUnchecked(std::move(n), metas);
    for (size_t k = 0; k < metas.size(); ++k) {
      int v = g.nodes()[idx].outputs[k];
      g.value(v).placement = placements[k];
      ids.push_back(v);
    }
  }
  for (int i = 0; i < def.outputs_size(); ++i) {
    const auto& o = def.outputs(i);
    if (o.value() < 0 || o.value() >= static_cast<int>(ids.size()))
      return absl::InvalidArgumentError(absl::StrCat("graph @", def.name(), ": output ", i, " refers to value ",
                                                     o.value(), " which does not exist"));
    g.AddOutput(ids[o.value()], o.updates() < 0 ? -1 : o.updates());
  }
  return g;
}

}  // namespace

loom::v1::GraphDef GraphToProto(const Graph& g) {
  loom::v1::GraphDef def;
  ToProto(g, &def);
  return def;
}

absl::StatusOr<Graph> GraphFromProto(const loom::v1::GraphDef& def) {
  LOOM_ASSIGN_OR_RETURN(Graph g, FromProto(def));
  LOOM_RETURN_IF_ERROR(Verify(g));
  return g;
}

}  // namespace loom::compiler::ir
