#include "compiler/import/onnx/builder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::compiler::import::onnx {
namespace {

// Ops whose result is not a function of their inputs alone: never folded.
bool Foldable(absl::string_view op) { return op != "dropout"; }

int64_t SafeNumel(absl::Span<const int64_t> shape, int64_t cap) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > cap / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

// ---- Builder ----------------------------------------------------------------

absl::StatusOr<std::vector<Val>> Builder::Emit(absl::string_view op, const std::vector<Val>& ins,
                                               const ir::Attrs& attrs) {
  std::vector<ir::TensorMeta> metas;
  bool all_const = true;
  for (const Val& v : ins) {
    metas.push_back(v.meta);
    all_const = all_const && v.is_const();
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorMeta> outs, ir::InferOp(op, metas, attrs, nullptr));
  int64_t total = 0;
  for (const ir::TensorMeta& m : outs) {
    const int64_t n = SafeNumel(m.shape, limits_.max_elements);
    if (n < 0)
      return absl::InvalidArgumentError(absl::StrCat(op, ": result ", ShapeToString(m.shape), " exceeds the limit of ",
                                                     limits_.max_elements, " elements"));
    total += n;
  }
  std::vector<Val> result(outs.size());
  if (all_const && Foldable(op) && total <= limits_.max_fold_elements) {
    std::vector<Tensor> ts;
    for (const Val& v : ins) ts.push_back(v.value);
    LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> vals, kernels::RunOp(op, ts, attrs, kernels::Impl::kReference));
    ++folded_;
    for (size_t i = 0; i < vals.size(); ++i) {
      result[i].meta = outs[i];
      result[i].value = std::move(vals[i]);
    }
    return result;
  }
  std::vector<int> ids;
  for (const Val& v : ins) ids.push_back(Materialize(v));
  LOOM_ASSIGN_OR_RETURN(std::vector<int> out_ids, g_.AddOp(op, std::move(ids), attrs));
  for (size_t i = 0; i < out_ids.size(); ++i) {
    result[i].meta = outs[i];
    result[i].id = out_ids[i];
  }
  return result;
}

absl::StatusOr<Val> Builder::Emit1(absl::string_view op, const std::vector<Val>& ins, const ir::Attrs& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Val> outs, Emit(op, ins, attrs));
  if (outs.empty()) return absl::InternalError(absl::StrCat(op, " has no outputs"));
  return outs[0];
}

int Builder::Materialize(const Val& v) {
  if (v.id >= 0 || !v.is_const()) return v.id;
  auto key = std::make_tuple(static_cast<const void*>(v.value.storage().get()), v.value.offset(), v.meta.ToString());
  auto it = const_ids_.find(key);
  if (it != const_ids_.end()) return it->second;
  const std::string name = UniqueName(v.name.empty() ? "const" : v.name);
  const int id = g_.AddInput(name, v.meta, ir::InputKind::kConst);
  used_names_[name] = 1;
  consts_[name] = v.value.Contiguous();
  const_ids_[key] = id;
  // A named constant keeps its input: later uses through the table share it.
  auto vit = vals_.find(v.name);
  if (vit != vals_.end() && vit->second.is_const() && vit->second.value.storage() == v.value.storage())
    vit->second.id = id;
  return id;
}

bool Builder::IsParam(const Val& v) const {
  if (v.id < 0) return false;
  for (const ir::GraphInput& in : g_.inputs())
    if (in.value == v.id) return in.kind == ir::InputKind::kParam;
  return false;
}

int Builder::AddInput(const std::string& name, ir::TensorMeta meta, ir::InputKind kind) {
  const std::string unique = UniqueName(name);
  used_names_[unique] = 1;
  return g_.AddInput(unique, std::move(meta), kind);
}

std::string Builder::UniqueName(const std::string& base) {
  if (!used_names_.count(base) && g_.FindInput(base) < 0) return base;
  for (int k = 2;; ++k) {
    std::string n = absl::StrCat(base, "#", k);
    if (!used_names_.count(n) && g_.FindInput(n) < 0) return n;
  }
}

Val* Builder::Find(const std::string& name) {
  auto it = vals_.find(name);
  return it == vals_.end() ? nullptr : &it->second;
}

absl::Status Builder::Define(const std::string& name, Val v) {
  if (vals_.count(name)) return absl::InvalidArgumentError(absl::StrCat("value '", name, "' is defined twice"));
  v.name = name;
  vals_.emplace(name, std::move(v));
  return absl::OkStatus();
}

// ---- NodeCtx ----------------------------------------------------------------

absl::Status NodeCtx::Error(absl::string_view reason) const {
  return absl::InvalidArgumentError(absl::StrCat(display_, ": ", reason));
}

absl::StatusOr<Val> NodeCtx::In(int i) {
  if (!HasInput(i)) return Error(absl::StrCat("input ", i, " is missing"));
  Val* v = b_.Find(node_.input(i));
  if (!v) return Error(absl::StrCat("input ", i, " '", node_.input(i), "' is not defined"));
  return *v;
}

absl::StatusOr<Tensor> NodeCtx::ConstIn(int i, absl::string_view what) {
  LOOM_ASSIGN_OR_RETURN(Val v, In(i));
  if (v.is_const()) return v.value;
  b_.set_needs_value(node_.input(i));
  return Error(absl::StrCat(what, " (input ", i, " '", node_.input(i),
                            "') must be known at import time, but it is computed from the graph's data inputs"));
}

absl::StatusOr<std::vector<int64_t>> NodeCtx::ConstInts(int i, absl::string_view what) {
  LOOM_ASSIGN_OR_RETURN(Tensor t, ConstIn(i, what));
  if (IsFloating(t.dtype()))
    return Error(absl::StrCat(what, " (input ", i, "): expected an integer tensor, got ", DTypeName(t.dtype())));
  if (t.ndim() > 1) return Error(absl::StrCat(what, " (input ", i, "): expected a 1-D tensor, got ", ShapeToString(t.shape())));
  return ToInts(t);
}

absl::StatusOr<double> NodeCtx::ConstScalar(int i, absl::string_view what) {
  LOOM_ASSIGN_OR_RETURN(Tensor t, ConstIn(i, what));
  if (t.numel() != 1)
    return Error(absl::StrCat(what, " (input ", i, "): expected one element, got ", ShapeToString(t.shape())));
  return t.GetDouble(0);
}

const ::onnx::AttributeProto* NodeCtx::Attr(absl::string_view name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

absl::StatusOr<int64_t> NodeCtx::AttrInt(absl::string_view name, int64_t def) const {
  const auto* a = Attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::INT) return Error(absl::StrCat("attribute '", name, "': expected an int"));
  return a->i();
}

absl::StatusOr<double> NodeCtx::AttrFloat(absl::string_view name, double def) const {
  const auto* a = Attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::FLOAT) return Error(absl::StrCat("attribute '", name, "': expected a float"));
  return static_cast<double>(a->f());
}

absl::StatusOr<std::vector<int64_t>> NodeCtx::AttrInts(absl::string_view name) const {
  const auto* a = Attr(name);
  if (!a) return std::vector<int64_t>{};
  if (a->type() != ::onnx::AttributeProto::INTS) return Error(absl::StrCat("attribute '", name, "': expected ints"));
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

absl::StatusOr<std::string> NodeCtx::AttrString(absl::string_view name, const std::string& def) const {
  const auto* a = Attr(name);
  if (!a) return def;
  if (a->type() != ::onnx::AttributeProto::STRING) return Error(absl::StrCat("attribute '", name, "': expected a string"));
  return a->s();
}

absl::Status NodeCtx::OnlyAttrs(std::initializer_list<absl::string_view> known) const {
  for (const auto& a : node_.attribute()) {
    bool ok = false;
    for (absl::string_view k : known) ok = ok || a.name() == k;
    if (!ok) return Error(absl::StrCat("attribute '", a.name(), "' is not supported (known: ", absl::StrJoin(known, ", "), ")"));
  }
  return absl::OkStatus();
}

absl::Status NodeCtx::SetOut(int i, Val v) {
  if (!WantsOutput(i)) return absl::OkStatus();
  absl::Status s = b_.Define(node_.output(i), std::move(v));
  return s.ok() ? s : Error(s.message());
}

absl::StatusOr<std::vector<Val>> NodeCtx::Emit(absl::string_view op, const std::vector<Val>& ins,
                                               const ir::Attrs& attrs) {
  auto r = b_.Emit(op, ins, attrs);
  if (!r.ok()) return Error(r.status().message());
  return r;
}

absl::StatusOr<Val> NodeCtx::Emit1(absl::string_view op, const std::vector<Val>& ins, const ir::Attrs& attrs) {
  auto r = b_.Emit1(op, ins, attrs);
  if (!r.ok()) return Error(r.status().message());
  return r;
}

Val NodeCtx::Const(Tensor t) const {
  Val v;
  v.meta = kernels::MetaOf(t);
  v.value = std::move(t);
  v.name = absl::StrCat(node_.output_size() > 0 ? node_.output(0) : node_.name(), "/const");
  return v;
}

absl::StatusOr<Val> NodeCtx::Scalar(double x, DType dtype) const {
  LOOM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({}, dtype));
  t.SetDouble(0, x);
  return Const(std::move(t));
}

// ---- Helpers ------------------------------------------------------------------

absl::StatusOr<int> NormAxis(const NodeCtx& n, int64_t axis, int rank, absl::string_view what) {
  if (axis < -rank || axis >= std::max(rank, 1) || (rank == 0 && axis != 0 && axis != -1))
    return n.Error(absl::StrCat(what, " ", axis, " is out of range for rank ", rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::vector<int64_t> ToInts(const Tensor& t) {
  std::vector<int64_t> out(t.numel());
  const Tensor c = t.Contiguous();
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kI64: out[i] = c.data<int64_t>()[i]; break;
      case DType::kI32: out[i] = c.data<int32_t>()[i]; break;
      default: out[i] = static_cast<int64_t>(c.GetDouble(i)); break;
    }
  }
  return out;
}

std::vector<int64_t> ShapeVec(const Shape& s) { return std::vector<int64_t>(s.begin(), s.end()); }

Tensor IntTensor(const std::vector<int64_t>& values, absl::Span<const int64_t> shape, DType dtype) {
  Tensor t = Tensor::MustEmpty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kI64) t.data<int64_t>()[i] = values[i];
    else if (dtype == DType::kI32) t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
    else t.SetDouble(static_cast<int64_t>(i), static_cast<double>(values[i]));
  }
  return t;
}

}  // namespace loom::compiler::import::onnx
