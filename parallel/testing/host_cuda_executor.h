// HostCudaExecutor: a compiler::cuda::CudaExecutor that keeps its "device"
// buffers in host memory, for CPU tests of what the Trainer moves between
// host and device (TrainerOptions::make_cuda_executor).
//
//   HostCudaExecutor* dev = nullptr;
//   TrainerOptions o;  o.make_cuda_executor = HostCudaExecutor::Factory(&dev);
//   auto t = Trainer::Create(spec_with_device_cuda, FamilyModel(spec).value(), o);
//   t->Step(x, y);  dev->Value("wte");   // the value the trainer's step left "on the device"
//
// SetInput stores a copy of input k (checked against the graph's meta, as the
// real executor does) and Input returns a copy of what is stored. Step stands
// in for a training step: every parameter and optimizer-state input (kParam,
// kState) that was set becomes v * 0.5 + lr + step * (k + 1) / 1024, element
// by element in f32, so the stored state depends on every step's inputs and
// on the state before; Output(0) is the f32 sum of the first element of each
// of those inputs. Nothing else of the real executor is there (OutputDevice
// and further outputs are Unimplemented; no collective op of the graph runs,
// so ranks of a parallel program step without their peers). It keeps the
// graph and options it was created with, for tests of what the trainer hands
// over.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/tensor.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/ir/ir.h"

namespace loom::parallel::testing {

class HostCudaExecutor : public compiler::cuda::CudaExecutor {
 public:
  using FactoryFn = std::function<absl::StatusOr<std::unique_ptr<compiler::cuda::CudaExecutor>>(
      const compiler::ir::Graph&, const compiler::cuda::CudaOptions&)>;
  // A factory for TrainerOptions::make_cuda_executor; *made points at the
  // executor it made last (owned by the trainer).
  static FactoryFn Factory(HostCudaExecutor** made) {
    return [made](const compiler::ir::Graph& g, const compiler::cuda::CudaOptions& o)
               -> absl::StatusOr<std::unique_ptr<compiler::cuda::CudaExecutor>> {
      auto e = std::make_unique<HostCudaExecutor>(g, o);
      *made = e.get();
      return std::unique_ptr<compiler::cuda::CudaExecutor>(std::move(e));
    };
  }

  explicit HostCudaExecutor(const compiler::ir::Graph& g, compiler::cuda::CudaOptions o = {})
      : g_(g), options_(std::move(o)) {}

  absl::Status SetInput(int k, const Tensor& host) override {
    if (k < 0 || k >= static_cast<int>(g_.inputs().size()))
      return absl::InvalidArgumentError(absl::StrCat("SetInput: index ", k, " out of range"));
    const compiler::ir::TensorMeta& m = g_.meta(g_.inputs()[k].value);
    if (!host.defined() || host.dtype() != m.dtype || host.shape() != m.shape)
      return absl::InvalidArgumentError(absl::StrCat("SetInput: input ", g_.inputs()[k].name, ": expected ",
                                                     m.ToString()));
    stored_[k] = host.Contiguous().Clone();
    ++uploads_;
    return absl::OkStatus();
  }

  absl::Status ZeroInput(int k) override {
    if (k < 0 || k >= static_cast<int>(g_.inputs().size()))
      return absl::InvalidArgumentError(absl::StrCat("ZeroInput: index ", k, " out of range"));
    const compiler::ir::TensorMeta& m = g_.meta(g_.inputs()[k].value);
    stored_[k] = Tensor::Zeros(m.shape, m.dtype);
    ++zero_fills_;
    return absl::OkStatus();
  }

  absl::Status Step(absl::Span<const std::pair<int, Tensor>> step_inputs) override {
    float lr = 0, step = 0;
    for (const auto& [k, t] : step_inputs) {
      if (g_.inputs()[k].name == "lr") lr = t.data<float>()[0];
      if (g_.inputs()[k].name == "step") step = t.data<float>()[0];
    }
    loss_ = 0;
    for (auto& [k, t] : stored_) {
      const compiler::ir::InputKind kind = g_.inputs()[k].kind;
      if (kind != compiler::ir::InputKind::kParam && kind != compiler::ir::InputKind::kState) continue;
      float* p = t.data<float>();
      const float add = lr + step * static_cast<float>(k + 1) / 1024.0f;
      for (int64_t e = 0; e < t.numel(); ++e) p[e] = p[e] * 0.5f + add;
      loss_ += p[0];
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> Output(int i) override {
    if (i != 0) return absl::UnimplementedError("HostCudaExecutor: only output 0 (the loss)");
    Tensor l = Tensor::MustEmpty({}, DType::kF32);
    l.data<float>()[0] = loss_;
    return l;
  }
  absl::StatusOr<Tensor> Input(int k) override {
    auto it = stored_.find(k);
    if (it == stored_.end()) return absl::FailedPreconditionError(absl::StrCat("Input: input ", k, " was never set"));
    return it->second.Clone();
  }
  absl::StatusOr<Tensor> OutputDevice(int) override {
    return absl::UnimplementedError("HostCudaExecutor: no device outputs");
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  std::string Describe() const override { return "host stand-in for the CUDA executor\n"; }
  int64_t device_bytes() const override { return 0; }
  const compiler::cuda::CudaPlan& plan() const override { return plan_; }
  bool graph_replay() const override { return false; }

  // What is stored for the input named `name` (undefined when never set).
  Tensor Value(const std::string& name) const {
    const int k = g_.FindInput(name);
    auto it = stored_.find(k);
    return it == stored_.end() ? Tensor() : it->second;
  }
  const compiler::ir::Graph& graph() const { return g_; }
  // The options it was created with (device, communicators, ...).
  const compiler::cuda::CudaOptions& options() const { return options_; }
  int uploads() const { return uploads_; }
  int zero_fills() const { return zero_fills_; }

 private:
  compiler::ir::Graph g_;
  compiler::cuda::CudaOptions options_;
  compiler::cuda::CudaPlan plan_;
  std::map<int, Tensor> stored_;
  float loss_ = 0;
  int uploads_ = 0;
  int zero_fills_ = 0;
};

}  // namespace loom::parallel::testing
