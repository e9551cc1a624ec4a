#include "compiler/import/onnx/testing/onnx_test_util.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/executor.h"
#include "compiler/import/onnx/tensor_proto.h"

namespace loom::compiler::import::onnx::testing {

ModelBuilder::ModelBuilder(int opset) {
  model_.set_ir_version(8);
  model_.set_producer_name("loom-test");
  auto* o = model_.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  model_.mutable_graph()->set_name("test");
}

ModelBuilder& ModelBuilder::Input(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  auto* in = model_.mutable_graph()->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(OnnxType(dtype));
  auto* s = tt->mutable_shape();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] >= 0) s->add_dim()->set_dim_value(shape[i]);
    else s->add_dim()->set_dim_param(absl::StrCat("d", i));
  }
  return *this;
}

ModelBuilder& ModelBuilder::Initializer(const std::string& name, const Tensor& value) {
  *model_.mutable_graph()->add_initializer() = ToTensorProto(value, name);
  return *this;
}

::onnx::NodeProto& ModelBuilder::Node(const std::string& op, const std::vector<std::string>& inputs,
                                      const std::vector<std::string>& outputs, const std::string& name) {
  auto* n = model_.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? absl::StrCat(op, "_", model_.graph().node_size() - 1) : name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return *n;
}

ModelBuilder& ModelBuilder::Output(const std::string& name) {
  model_.mutable_graph()->add_output()->set_name(name);
  return *this;
}

ModelBuilder& ModelBuilder::Metadata(const std::string& key, const std::string& value) {
  auto* kv = model_.add_metadata_props();
  kv->set_key(key);
  kv->set_value(value);
  return *this;
}

std::string ModelBuilder::Bytes() const { return model_.SerializeAsString(); }

namespace {
::onnx::AttributeProto* NewAttr(::onnx::NodeProto& n, const std::string& name, ::onnx::AttributeProto::AttributeType t) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(t);
  return a;
}
}  // namespace

void AttrInt(::onnx::NodeProto& n, const std::string& name, int64_t v) { NewAttr(n, name, ::onnx::AttributeProto::INT)->set_i(v); }
void AttrFloat(::onnx::NodeProto& n, const std::string& name, float v) { NewAttr(n, name, ::onnx::AttributeProto::FLOAT)->set_f(v); }
void AttrInts(::onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = NewAttr(n, name, ::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void AttrString(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
  NewAttr(n, name, ::onnx::AttributeProto::STRING)->set_s(v);
}
void AttrTensor(::onnx::NodeProto& n, const std::string& name, const Tensor& v) {
  *NewAttr(n, name, ::onnx::AttributeProto::TENSOR)->mutable_t() = ToTensorProto(v, name);
}

absl::StatusOr<std::vector<Tensor>> RunForward(const ImportedModel& m, const std::map<std::string, Tensor>& data) {
  CompileOptions co;
  co.differentiate = false;
  LOOM_ASSIGN_OR_RETURN(Compilation c, Compile(m.graph, co));
  Executor exec(std::move(c.program));
  std::vector<Tensor> inputs;
  for (const ir::GraphInput& in : exec.program().graph.inputs()) {
    auto d = data.find(in.name);
    auto i = m.initial.find(in.name);
    if (d != data.end()) inputs.push_back(d->second);
    else if (i != m.initial.end()) inputs.push_back(i->second);
    else return absl::InvalidArgumentError(absl::StrCat("no value for graph input '", in.name, "'"));
  }
  std::vector<Tensor> outs;
  LOOM_RETURN_IF_ERROR(exec.Run(inputs, &outs));
  for (Tensor& t : outs) t = t.Clone();
  return outs;
}

}  // namespace loom::compiler::import::onnx::testing
