// The op registry: one entry per op, holding everything the rest of Loom needs
// to know about it.
//
// An OpDef carries
//   - shape/dtype inference (the compiler's static shapes come from here),
//   - fast kernels per device kind,
//   - a plain reference implementation (must run in f64: the consistency test
//     and finite-difference gradient checks use it),
//   - a gradient rule, written symbolically against GradBuilder so the same rule
//     serves eager checks (EagerGradBuilder) and graph autodiff (compiler/),
//   - a slot for the sharding rule (filled by dtensor/),
//   - consistency cases: input specs the shared consistency test runs.
//
// Registration happens at static-initialisation time:
//
//   LOOM_REGISTER_OP(MakeGeluOp());
//
// Libraries that register ops must be `alwayslink = True` in Bazel, or the
// linker drops the registration objects.
//
// Adding an op is described in docs/ops.md.
#pragma once

#include <any>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "base/rng.h"
#include "base/tensor.h"

namespace loom::kernels {

// ---- Attributes -------------------------------------------------------------
using AttrValue = absl::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

  Attrs& Set(const std::string& name, AttrValue v) {
    values_[name] = std::move(v);
    return *this;
  }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // Typed getters: the default when absent. An int attribute read as a float
  // converts; any other type mismatch returns the default.
  int64_t GetInt(const std::string& name, int64_t def = 0) const;
  double GetFloat(const std::string& name, double def = 0) const;
  bool GetBool(const std::string& name, bool def = false) const;
  std::string GetString(const std::string& name, const std::string& def = "") const;
  std::vector<int64_t> GetInts(const std::string& name, std::vector<int64_t> def = {}) const;
  const std::map<std::string, AttrValue>& values() const { return values_; }
  // Deterministic text form: "{axis=1, eps=1e-05}". Used by the IR printer.
  std::string ToString() const;
  bool operator==(const Attrs& o) const { return values_ == o.values_; }

 private:
  std::map<std::string, AttrValue> values_;
};

// ---- Signatures ---------------------------------------------------------------
struct TensorMeta {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const TensorMeta& o) const { return dtype == o.dtype && shape == o.shape; }
  std::string ToString() const;  // "f32[2, 3]"
};

inline TensorMeta MetaOf(const Tensor& t) { return {t.dtype(), t.shape()}; }

using InferFn = std::function<absl::StatusOr<std::vector<TensorMeta>>(
    absl::Span<const TensorMeta> inputs, const Attrs& attrs)>;

// Kernels write into preallocated outputs whose metas came from InferFn.
// Inputs may be strided views; outputs are contiguous.
using KernelFn = std::function<absl::Status(absl::Span<const Tensor> inputs,
                                            absl::Span<Tensor> outputs, const Attrs& attrs)>;

// ---- Gradients ----------------------------------------------------------------
// Values are opaque handles owned by the builder: eager tensors in
// EagerGradBuilder, graph values in the compiler's autodiff.
class GradBuilder {
 public:
  using Value = int;
  static constexpr Value kNone = -1;  // "no gradient flows here"
  virtual ~GradBuilder() = default;
  virtual absl::StatusOr<std::vector<Value>> Emit(absl::string_view op, std::vector<Value> inputs,
                                                  Attrs attrs = {}) = 0;
  virtual TensorMeta Meta(Value v) const = 0;
  // Convenience for single-output ops.
  absl::StatusOr<Value> Emit1(absl::string_view op, std::vector<Value> inputs, Attrs attrs = {});
};

struct GradContext {
  std::vector<GradBuilder::Value> inputs;
  std::vector<GradBuilder::Value> outputs;
  // One per output; kNone when that output receives no gradient.
  std::vector<GradBuilder::Value> grad_outputs;
  Attrs attrs;
};

// Returns one entry per input: the gradient value, or kNone when the input is not
// differentiable (integer ids, masks) or receives no gradient.
using GradFn = std::function<absl::StatusOr<std::vector<GradBuilder::Value>>(GradBuilder& b,
                                                                             const GradContext& ctx)>;

// ---- Consistency cases ----------------------------------------------------------
struct InputSpec {
  TensorMeta meta;
  double lo = -1.0, hi = 1.0;  // uniform range (integers: [lo, hi))
  bool differentiable = true;  // checked against finite differences
  // Optional custom fill (e.g. masks, ids with ignore entries); overrides lo/hi.
  std::function<void(Tensor& t, const Philox& rng)> fill;
};

struct ConsistencyCase {
  std::string name;
  std::vector<InputSpec> inputs;
  Attrs attrs;
  // Outputs whose gradient the check feeds (default: every floating output).
  std::vector<int> grad_outputs;
  double fd_step = 1e-6;  // central-difference step in f64
};

// ---- The op definition ----------------------------------------------------------
struct OpDef {
  std::string name;
  std::string doc;
  int num_inputs = 1;    // -1: variadic
  int num_outputs = 1;
  InferFn infer;
  std::map<DeviceKind, KernelFn> kernels;
  // Which dtypes the fast kernels accept (per device); empty means {f32}.
  std::map<DeviceKind, std::vector<DType>> kernel_dtypes;
  KernelFn reference;  // plain, readable, must support f64 (and whatever the kernels take)
  GradFn grad;         // null: see no_grad_reason
  // Why `grad` is null ("backward op of layernorm", "integer output"). The
  // consistency test fails an op with neither a grad rule nor a reason.
  std::string no_grad_reason;
  // The sharding rule (dtensor/ fills this; kernels/ never reads it).
  std::any sharding_rule;
  bool elementwise = false;  // pointwise over broadcast inputs: a fusion candidate
  // A collective: its kernels/reference give the one-rank semantics; lowering
  // runs it through the communicator bound to its "group" attribute
  // (compiler/comm/communicator.h). Passes must not drop or reorder it.
  bool collective = false;
  std::vector<ConsistencyCase> cases;
};

class OpRegistry {
 public:
  static OpRegistry& Global();
  // Fails with AlreadyExists on a duplicate name and InvalidArgument when the
  // definition lacks a name, an InferFn or a reference.
  absl::Status Register(OpDef def);
  const OpDef* Find(absl::string_view name) const;
  OpDef* FindMutable(absl::string_view name);
  absl::StatusOr<const OpDef*> Get(absl::string_view name) const;  // NotFound names the op
  std::vector<std::string> Names() const;                          // sorted

 private:
  std::map<std::string, OpDef, std::less<>> ops_;
};

// Registers at static-init time; aborts with a message on a bad definition.
struct OpRegistration {
  explicit OpRegistration(OpDef def);
};
#define LOOM_REGISTER_OP_CONCAT2(a, b) a##b
#define LOOM_REGISTER_OP_CONCAT(a, b) LOOM_REGISTER_OP_CONCAT2(a, b)
#define LOOM_REGISTER_OP(def_expr) \
  static ::loom::kernels::OpRegistration LOOM_REGISTER_OP_CONCAT(_loom_op_reg_, __COUNTER__)(def_expr)

// ---- Eager execution --------------------------------------------------------------
enum class Impl { kKernel, kReference };

// Validates input count, runs inference, allocates outputs and runs the kernel
// for the inputs' device (or the reference). Errors name the op.
absl::StatusOr<std::vector<Tensor>> RunOp(absl::string_view name, absl::Span<const Tensor> inputs,
                                          const Attrs& attrs = {}, Impl impl = Impl::kKernel);

// A GradBuilder that executes every emitted op immediately.
class EagerGradBuilder : public GradBuilder {
 public:
  explicit EagerGradBuilder(Impl impl = Impl::kReference) : impl_(impl) {}
  Value Add(Tensor t);
  const Tensor& Get(Value v) const { return values_[v]; }
  absl::StatusOr<std::vector<Value>> Emit(absl::string_view op, std::vector<Value> inputs,
                                          Attrs attrs = {}) override;
  TensorMeta Meta(Value v) const override { return MetaOf(values_[v]); }

 private:
  Impl impl_;
  std::vector<Tensor> values_;
};

// Runs op `name` forward on `inputs`, then its grad rule with `grad_outputs`
// (undefined Tensor = no gradient), eagerly. Returns one tensor per input
// (undefined where no gradient flows).
absl::StatusOr<std::vector<Tensor>> EagerGradients(absl::string_view name,
                                                   absl::Span<const Tensor> inputs,
                                                   absl::Span<const Tensor> grad_outputs,
                                                   const Attrs& attrs = {},
                                                   Impl impl = Impl::kReference);

}  // namespace loom::kernels
