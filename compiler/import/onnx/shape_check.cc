#include "compiler/import/onnx/shape_check.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/tensor_proto.h"
#include "onnx/shape_inference/implementation.h"

namespace loom::compiler::import::onnx {
namespace {

constexpr int64_t kKeepValueElements = 4096;

void SetType(const ir::TensorMeta& meta, ::onnx::ValueInfoProto* vi) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(OnnxType(meta.dtype));
  auto* shape = tt->mutable_shape();
  for (int64_t d : meta.shape) shape->add_dim()->set_dim_value(d);
}

// The model's structure with static input types and small constant values.
::onnx::ModelProto StaticCopy(const ::onnx::ModelProto& model, Builder& b) {
  ::onnx::ModelProto c;
  c.set_ir_version(model.ir_version());
  *c.mutable_opset_import() = model.opset_import();
  const ::onnx::GraphProto& g = model.graph();
  ::onnx::GraphProto* cg = c.mutable_graph();
  *cg->mutable_node() = g.node();
  std::set<std::string> done;
  auto add = [&](const std::string& name) {
    Val* v = b.Find(name);
    if (!v || !done.insert(name).second) return;
    if (v->is_const() && v->value.numel() <= kKeepValueElements) {
      *cg->add_initializer() = ToTensorProto(v->value, name);
    } else {
      auto* in = cg->add_input();
      in->set_name(name);
      SetType(v->meta, in);
    }
  };
  for (const auto& t : g.initializer()) add(t.name());
  for (const auto& in : g.input()) add(in.name());
  for (const auto& out : g.output()) cg->add_output()->set_name(out.name());
  return c;
}

}  // namespace

absl::StatusOr<int> CrossCheckShapes(const ::onnx::ModelProto& model, Builder& b) {
  ::onnx::ModelProto c = StaticCopy(model, b);
  try {
    ::onnx::shape_inference::InferShapes(c);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("ONNX shape inference: ", e.what()));
  }
  int agreed = 0;
  auto check = [&](const ::onnx::ValueInfoProto& vi) -> absl::Status {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return absl::OkStatus();
    const auto& tt = vi.type().tensor_type();
    Shape s;
    for (const auto& d : tt.shape().dim()) {
      if (!d.has_dim_value()) return absl::OkStatus();
      s.push_back(d.dim_value());
    }
    Val* v = b.Find(vi.name());
    if (!v) return absl::OkStatus();
    auto dt = LoomDType(tt.elem_type());
    if (s != v->meta.shape || (dt.ok() && *dt != v->meta.dtype) || (!dt.ok() && tt.elem_type() != 0))
      return absl::InvalidArgumentError(absl::StrCat("value '", vi.name(), "': Loom infers ", v->meta.ToString(),
                                                     ", ONNX shape inference ", OnnxTypeName(tt.elem_type()),
                                                     ShapeToString(s)));
    ++agreed;
    return absl::OkStatus();
  };
  for (const auto& vi : c.graph().value_info()) LOOM_RETURN_IF_ERROR(check(vi));
  for (const auto& vi : c.graph().output()) LOOM_RETURN_IF_ERROR(check(vi));
  return agreed;
}

}  // namespace loom::compiler::import::onnx
