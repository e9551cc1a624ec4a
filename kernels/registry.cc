#include "kernels/registry.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::kernels {

int64_t Attrs::GetInt(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = absl::get_if<int64_t>(&it->second)) return *v;
  if (auto* b = absl::get_if<bool>(&it->second)) return *b ? 1 : 0;
  return def;
}

double Attrs::GetFloat(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = absl::get_if<double>(&it->second)) return *v;
  if (auto* i = absl::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return def;
}

bool Attrs::GetBool(const std::string& name, bool def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = absl::get_if<bool>(&it->second)) return *v;
  if (auto* i = absl::get_if<int64_t>(&it->second)) return *i != 0;
  return def;
}

std::string Attrs::GetString(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = absl::get_if<std::string>(&it->second)) return *v;
  return def;
}

std::vector<int64_t> Attrs::GetInts(const std::string& name, std::vector<int64_t> def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = absl::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return def;
}

namespace {
struct AttrPrinter {
  std::string operator()(int64_t v) const { return absl::StrCat(v); }
  std::string operator()(double v) const {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    std::string s = buf;
    // Keep floats recognisable as floats when parsed back.
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  std::string operator()(bool v) const { return v ? "true" : "false"; }
  std::string operator()(const std::string& v) const { return absl::StrCat("\"", v, "\""); }
  std::string operator()(const std::vector<int64_t>& v) const {
    return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
  }
};
}  // namespace

std::string Attrs::ToString() const {
  std::vector<std::string> parts;
  for (const auto& [k, v] : values_) parts.push_back(absl::StrCat(k, "=", absl::visit(AttrPrinter{}, v)));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

std::string TensorMeta::ToString() const { return absl::StrCat(DTypeName(dtype), ShapeToString(shape)); }

absl::StatusOr<GradBuilder::Value> GradBuilder::Emit1(absl::string_view op, std::vector<Value> inputs,
                                                      Attrs attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Value> out, Emit(op, std::move(inputs), std::move(attrs)));
  if (out.empty()) return absl::InternalError(absl::StrCat("op ", op, " produced no output"));
  return out[0];
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry* r = new OpRegistry();
  return *r;
}

absl::Status OpRegistry::Register(OpDef def) {
  if (def.name.empty()) return absl::InvalidArgumentError("op definition without a name");
  if (!def.infer) return absl::InvalidArgumentError(absl::StrCat("op ", def.name, " has no InferFn"));
  if (!def.reference)
    return absl::InvalidArgumentError(absl::StrCat("op ", def.name, " has no reference implementation"));
  if (ops_.count(def.name)) return absl::AlreadyExistsError(absl::StrCat("op ", def.name, " registered twice"));
  std::string name = def.name;
  ops_.emplace(std::move(name), std::move(def));
  return absl::OkStatus();
}

const OpDef* OpRegistry::Find(absl::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

OpDef* OpRegistry::FindMutable(absl::string_view name) {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

absl::StatusOr<const OpDef*> OpRegistry::Get(absl::string_view name) const {
  const OpDef* d = Find(name);
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("unknown op '", name, "'"));
  return d;
}

std::vector<std::string> OpRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [k, v] : ops_) names.push_back(k);
  return names;
}

OpRegistration::OpRegistration(OpDef def) {
  std::string name = def.name;
  absl::Status s = OpRegistry::Global().Register(std::move(def));
  if (!s.ok()) {
    std::fprintf(stderr, "loom: registering op '%s': %s\n", name.c_str(), std::string(s.message()).c_str());
    std::abort();
  }
}

absl::StatusOr<std::vector<Tensor>> RunOp(absl::string_view name, absl::Span<const Tensor> inputs,
                                          const Attrs& attrs, Impl impl) {
  LOOM_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Get(name));
  if (def->num_inputs >= 0 && static_cast<int>(inputs.size()) != def->num_inputs)
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected ", def->num_inputs, " inputs, got ", inputs.size()));
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  Device device = Device::CPU();
  for (size_t i = 0; i < inputs.size(); ++i) {
    metas.push_back(MetaOf(inputs[i]));
    if (i == 0) device = inputs[i].device();
    else if (inputs[i].device() != device)
      return absl::InvalidArgumentError(absl::StrCat(name, ": input ", i, " is on ", inputs[i].device().ToString(),
                                                     " but input 0 is on ", device.ToString()));
  }
  auto out_metas = def->infer(metas, attrs);
  if (!out_metas.ok()) return Annotate(out_metas.status(), name);
  const KernelFn* fn = nullptr;
  if (impl == Impl::kReference) {
    if (!device.is_cpu())
      return absl::InvalidArgumentError(absl::StrCat(name, ": the reference runs on cpu, inputs are on ",
                                                     device.ToString()));
    fn = &def->reference;
  } else {
    auto it = def->kernels.find(device.kind);
    if (it == def->kernels.end())
      return absl::UnimplementedError(
          absl::StrCat(name, ": no kernel for device ", DeviceKindName(device.kind)));
    fn = &it->second;
  }
  std::vector<Tensor> outputs;
  outputs.reserve(out_metas->size());
  for (const TensorMeta& m : *out_metas) {
    LOOM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(m.shape, m.dtype, device));
    outputs.push_back(std::move(t));
  }
  absl::Status s = (*fn)(inputs, absl::MakeSpan(outputs), attrs);
  if (!s.ok()) return Annotate(s, name);
  return outputs;
}

GradBuilder::Value EagerGradBuilder::Add(Tensor t) {
  values_.push_back(std::move(t));
  return static_cast<Value>(values_.size() - 1);
}

absl::StatusOr<std::vector<GradBuilder::Value>> EagerGradBuilder::Emit(absl::string_view op,
                                                                       std::vector<Value> inputs,
                                                                       Attrs attrs) {
  std::vector<Tensor> ts;
  for (Value v : inputs) {
    if (v < 0 || v >= static_cast<Value>(values_.size()))
      return absl::InternalError(absl::StrCat("grad rule passed an invalid value to ", op));
    ts.push_back(values_[v]);
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunOp(op, ts, attrs, impl_));
  std::vector<Value> ids;
  for (Tensor& t : outs) ids.push_back(Add(std::move(t)));
  return ids;
}

absl::StatusOr<std::vector<Tensor>> EagerGradients(absl::string_view name, absl::Span<const Tensor> inputs,
                                                   absl::Span<const Tensor> grad_outputs, const Attrs& attrs,
                                                   Impl impl) {
  LOOM_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Get(name));
  if (!def->grad)
    return absl::FailedPreconditionError(absl::StrCat(name, " has no gradient rule: ", def->no_grad_reason));
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunOp(name, inputs, attrs, impl));
  if (grad_outputs.size() != outs.size())
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", grad_outputs.size(), " output gradients for ",
                                                   outs.size(), " outputs"));
  EagerGradBuilder b(impl);
  GradContext ctx;
  ctx.attrs = attrs;
  for (const Tensor& t : inputs) ctx.inputs.push_back(b.Add(t));
  for (Tensor& t : outs) ctx.outputs.push_back(b.Add(t));
  for (const Tensor& g : grad_outputs) ctx.grad_outputs.push_back(g.defined() ? b.Add(g) : GradBuilder::kNone);
  LOOM_ASSIGN_OR_RETURN(std::vector<GradBuilder::Value> grads, def->grad(b, ctx));
  if (grads.size() != inputs.size())
    return absl::InternalError(absl::StrCat(name, ": grad rule returned ", grads.size(), " values for ",
                                            inputs.size(), " inputs"));
  std::vector<Tensor> result;
  for (GradBuilder::Value v : grads) result.push_back(v == GradBuilder::kNone ? Tensor() : b.Get(v));
  return result;
}

}  // namespace loom::kernels
