#include "compiler/import/onnx/importer.h"

#include <limits.h>
#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/import/onnx/builder.h"
#include "compiler/import/onnx/model_check.h"
#include "compiler/import/onnx/op_table.h"
#include "compiler/import/onnx/params.h"
#include "compiler/import/onnx/shape_check.h"
#include "compiler/passes/recover.h"
#include "compiler/import/onnx/tensor_proto.h"

namespace loom::compiler::import::onnx {
namespace {

// What the conversion loop needs, read once from the model.
struct Prepared {
  const ::onnx::ModelProto* model = nullptr;
  int opset = 0;
  std::vector<int> order;
  std::vector<std::pair<std::string, Tensor>> inits;  // in model order
  std::set<std::string> init_names;
  ParamSplit split;
  TensorReadOptions read;
};

absl::Status ReadInitializers(::onnx::ModelProto& m, const ImportOptions& o, Prepared& p) {
  std::set<std::string> floats;
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    LOOM_ASSIGN_OR_RETURN(Tensor v, FromTensorProto(t, p.read, absl::StrCat("initializer '", t.name(), "'")));
    // The tensor now owns the bytes; the message's copy goes.
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_int64_data();
    t.clear_int32_data();
    t.clear_double_data();
    if (IsFloating(v.dtype())) floats.insert(t.name());
    p.init_names.insert(t.name());
    p.inits.emplace_back(t.name(), std::move(v));
  }
  (void)o;
  LOOM_ASSIGN_OR_RETURN(p.split, ClassifyInitializers(m, p.order, p.init_names, floats));
  return absl::OkStatus();
}

absl::StatusOr<ir::TensorMeta> DataInputMeta(const ::onnx::ValueInfoProto& in, const ImportOptions& o) {
  const std::string what = absl::StrCat("graph input '", in.name(), "'");
  if (!in.type().has_tensor_type())
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a tensor (sequence, map and optional types are not supported)"));
  const auto& tt = in.type().tensor_type();
  auto dt = LoomDType(tt.elem_type());
  if (!dt.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", dt.status().message()));
  ir::TensorMeta meta{*dt, {}};
  auto given = o.input_shapes.find(in.name());
  const int declared_rank = tt.has_shape() ? tt.shape().dim_size() : -1;
  if (given != o.input_shapes.end()) {
    meta.shape = given->second;
  } else if (o.default_input_shape && (declared_rank < 0 || declared_rank == static_cast<int>(o.default_input_shape->size()))) {
    meta.shape = *o.default_input_shape;
    for (int i = 0; i < declared_rank; ++i) {
      const auto& d = tt.shape().dim(i);
      if (d.has_dim_value() && d.dim_value() != meta.shape[i])
        return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", i, " is ", d.dim_value(),
                                                       " in the model, the job needs ", meta.shape[i]));
    }
  } else {
    if (!tt.has_shape()) return absl::InvalidArgumentError(absl::StrCat(what, ": has no shape; give it in input_shapes"));
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      if (d.has_dim_value()) {
        meta.shape.push_back(d.dim_value());
        continue;
      }
      auto it = d.has_dim_param() ? o.dims.find(d.dim_param()) : o.dims.end();
      if (it == o.dims.end() && i == 0 && o.batch > 0) {
        meta.shape.push_back(o.batch);
        continue;
      }
      if (it == o.dims.end())
        return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", i, " is symbolic ('", d.dim_param(),
                                                       "'); bind it in dims or give the shape in input_shapes"));
      meta.shape.push_back(it->second);
    }
  }
  LOOM_RETURN_IF_ERROR(CheckedNumel(meta.shape, o.max_elements, what).status());
  return meta;
}

// Adds parameters, buffers and data inputs to the builder. Data inputs named
// in `bound` become constants from input_values.
absl::Status DefineInputs(Builder& b, const Prepared& p, const ImportOptions& o, const std::set<std::string>& bound,
                          std::map<std::string, Tensor>& params) {
  for (const auto& [name, t] : p.inits) {
    Val v;
    v.meta = kernels::MetaOf(t);
    if (p.split.params.count(name)) {
      v.id = b.AddInput(name, v.meta, ir::InputKind::kParam);
      params[name] = t;
    } else {
      v.value = t;
    }
    LOOM_RETURN_IF_ERROR(b.Define(name, v));
  }
  for (const auto& in : p.model->graph().input()) {
    if (p.init_names.count(in.name())) continue;
    LOOM_ASSIGN_OR_RETURN(ir::TensorMeta meta, DataInputMeta(in, o));
    Val v;
    v.meta = meta;
    if (bound.count(in.name())) {
      const Tensor& t = o.input_values.at(in.name());
      if (!(kernels::MetaOf(t) == meta))
        return absl::InvalidArgumentError(absl::StrCat(
            "input_values['", in.name(), "'] is ", kernels::MetaOf(t).ToString(), ", the input is ", meta.ToString()));
      v.value = t;
    } else {
      v.id = b.AddInput(in.name(), meta, ir::InputKind::kInput);
    }
    LOOM_RETURN_IF_ERROR(b.Define(in.name(), v));
  }
  return absl::OkStatus();
}

absl::Status ConvertNode(Builder& b, const ::onnx::NodeProto& node, int index, int opset) {
  const std::string display = NodeDisplay(node, index, opset);
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return absl::InvalidArgumentError(absl::StrCat(display, ": domain '", node.domain(), "' is not supported"));
  const OpEntry* e = FindOp(node.op_type());
  if (!e) return absl::InvalidArgumentError(absl::StrCat(display, ": ", UnsupportedReason(node.op_type())));
  if (opset < e->since)
    return absl::InvalidArgumentError(absl::StrCat(display, ": Loom reads ", node.op_type(), " from opset ", e->since));
  NodeCtx ctx(b, node, index, opset, display);
  const size_t first_new = b.graph().nodes().size();
  LOOM_RETURN_IF_ERROR(e->convert(ctx));
  std::vector<ir::Node>& nodes = b.graph().mutable_nodes();
  for (size_t i = first_new; i < nodes.size(); ++i) nodes[i].origin = absl::StrCat("ONNX ", display);
  for (int k = 0; k < node.output_size(); ++k)
    if (!node.output(k).empty() && !b.Has(node.output(k)))
      return absl::InvalidArgumentError(absl::StrCat(display, ": output ", k, " ('", node.output(k),
                                                     "') is not produced by Loom's conversion"));
  return absl::OkStatus();
}

// One conversion attempt with `bound` data inputs folded as constants.
absl::StatusOr<ImportedModel> Convert(const Prepared& p, const ImportOptions& o, const std::set<std::string>& bound,
                                      std::string* needs_value) {
  const ::onnx::GraphProto& g = p.model->graph();
  ImportedModel m;
  m.graph.set_name(g.name().empty() ? "onnx" : g.name());
  BuilderLimits limits;
  limits.max_elements = o.max_elements;
  Builder b(m.graph, limits, p.read);
  std::map<std::string, Tensor> params;
  LOOM_RETURN_IF_ERROR(DefineInputs(b, p, o, bound, params));
  for (int i : p.order) {
    absl::Status s = ConvertNode(b, g.node(i), i, p.opset);
    if (!s.ok()) {
      *needs_value = b.needs_value();
      return s;
    }
  }
  for (const auto& out : g.output()) {
    Val* v = b.Find(out.name());
    if (!v) return absl::InvalidArgumentError(absl::StrCat("graph output '", out.name(), "' is not defined"));
    m.graph.AddOutput(b.Materialize(*v));
    m.outputs.push_back(out.name());
  }
  if (o.onnx_shape_check) {
    LOOM_ASSIGN_OR_RETURN(m.report.shape_checked, CrossCheckShapes(*p.model, b));
  }
  m.initial = std::move(params);
  for (const auto& [name, t] : b.const_inputs()) m.initial[name] = t;
  m.report.converted_nodes = static_cast<int>(m.graph.nodes().size());
  if (o.recover_patterns) {
    auto log = passes::RecoverFastOps(m.graph, m.initial);
    if (!log.ok()) return Annotate(log.status(), "recovering fused ops");
    m.report.recovered = true;
    m.report.patterns = std::move(*log);
  }
  for (const ir::GraphInput& in : m.graph.inputs()) {
    if (in.kind == ir::InputKind::kParam) m.params.push_back(in.name);
    if (in.kind == ir::InputKind::kConst) m.buffers.push_back(in.name);
    if (in.kind == ir::InputKind::kInput) m.data_inputs.push_back(in.name);
  }
  m.report.folded_ops = b.folded_ops();
  m.report.graph_nodes = static_cast<int>(m.graph.nodes().size());
  m.report.constant_inputs.assign(bound.begin(), bound.end());
  return m;
}

absl::StatusOr<ImportedModel> Import(::onnx::ModelProto& model, const ImportOptions& o, const std::string& base_dir) {
  Prepared p;
  p.model = &model;
  LOOM_ASSIGN_OR_RETURN(p.opset, ModelOpset(model));
  LOOM_ASSIGN_OR_RETURN(p.order, CheckGraph(model.graph(), o.max_nodes));
  p.read.base_dir = base_dir;
  p.read.allowed_roots = o.allowed_roots;
  p.read.max_elements = o.max_elements;
  LOOM_RETURN_IF_ERROR(ReadInitializers(model, o, p));
  std::set<std::string> bound;
  for (;;) {
    std::string needs;
    auto m = Convert(p, o, bound, &needs);
    if (m.ok() || needs.empty()) {
      if (!m.ok()) return m.status();
      m->report.opset = p.opset;
      m->report.producer = absl::StrCat(model.producer_name(), model.producer_version().empty() ? "" : " ",
                                        model.producer_version());
      m->report.param_rule = p.split.rule;
      m->report.onnx_nodes = model.graph().node_size();
      for (const auto& n : model.graph().node()) ++m->report.op_counts[n.op_type()];
      return m;
    }
    // A value was needed at import time: bind the data inputs it comes from,
    // when their values were given, and try again.
    const size_t before = bound.size();
    for (const std::string& in : UpstreamInputs(model.graph(), needs, p.init_names))
      if (o.input_values.count(in)) bound.insert(in);
    if (bound.size() == before) return m.status();
  }
}

}  // namespace

int64_t ImportedModel::NumParameters() const {
  int64_t n = 0;
  for (const std::string& p : params) n += initial.at(p).numel();
  return n;
}

absl::StatusOr<ImportedModel> ImportModel(const std::string& path, const ImportOptions& options) {
  LOOM_ASSIGN_OR_RETURN(::onnx::ModelProto model, ReadModelFile(path, options.max_model_bytes));
  char buf[PATH_MAX];
  std::string dir = ::realpath(path.c_str(), buf) ? std::filesystem::path(buf).parent_path().string() : ".";
  auto m = Import(model, options, dir);
  if (!m.ok()) return Annotate(m.status(), path);
  return m;
}

absl::StatusOr<ImportedModel> ImportModelBytes(absl::string_view bytes, const ImportOptions& options) {
  LOOM_ASSIGN_OR_RETURN(::onnx::ModelProto model, ParseModelBytes(bytes, options.max_model_bytes));
  return Import(model, options, options.base_dir);
}

}  // namespace loom::compiler::import::onnx
