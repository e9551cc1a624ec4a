#include "runtime/train/trainer.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/training.h"
#include "compiler/optimizer.h"
#include "runtime/train/onnx_model.h"

namespace loom::train {
namespace {

absl::StatusOr<std::unique_ptr<compiler::Executor>> MakeExecutor(compiler::Compilation& c) {
  if (!c.program) return absl::InternalError("compilation produced no program");
  return std::make_unique<compiler::Executor>(std::move(c.program));
}

// The forward graphs (training: loss; evaluation: loss and logits), the
// parameters and the initial values of parameters and buffers: a built-in
// family (compiler/models) or an ONNX model (onnx_model.h).
struct Forwards {
  std::vector<models::ParamInfo> params;
  compiler::Graph train, eval;
  std::map<std::string, Tensor> init;
  bool has_logits = true;
};

absl::StatusOr<Forwards> BuildForwards(const v1::JobSpec& spec, const TrainerOptions& options) {
  Forwards f;
  if (spec.model().family() == "onnx") {
    LOOM_ASSIGN_OR_RETURN(OnnxTrainingModel m, LoadOnnxModel(spec, options.recover_patterns));
    f.params = std::move(m.params);
    f.train = std::move(m.train_forward);
    f.eval = std::move(m.eval_forward);
    f.init = std::move(m.initial);
    f.has_logits = m.has_logits;
    return f;
  }
  LOOM_ASSIGN_OR_RETURN(f.params, models::Parameters(spec.model()));
  models::BuildOptions bo;
  bo.batch = spec.train().batch_size();
  LOOM_ASSIGN_OR_RETURN(f.train, models::BuildForward(spec.model(), bo));
  bo.return_logits = true;
  LOOM_ASSIGN_OR_RETURN(f.eval, models::BuildForward(spec.model(), bo));
  f.init = models::InitParameters(f.params, spec.train().seed());
  return f;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const v1::JobSpec& spec, TrainerOptions options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  t->options_ = std::move(options);
  const auto& tr = spec.train();
  LOOM_ASSIGN_OR_RETURN(Forwards fw, BuildForwards(spec, t->options_));
  t->params_ = fw.params;
  t->has_logits_ = fw.has_logits;

  std::map<std::string, bool> decays;
  for (const auto& p : t->params_) decays[p.name] = p.weight_decay;
  compiler::CompileOptions co;
  co.fuse = t->options_.fuse;
  // AdamW writes parameters and state in place: no arena copies of them and no
  // copy back after each step.
  co.lowering.in_place_updates = true;
  compiler::AdamWOptions adam;
  adam.beta1 = tr.beta1();
  adam.beta2 = tr.beta2();
  adam.eps = tr.eps();
  adam.weight_decay = tr.weight_decay();
  adam.max_norm = tr.grad_clip();
  adam.keep_gradients = t->options_.keep_gradients;
  adam.decays = [decays](const std::string& name) {
    auto it = decays.find(name);
    return it != decays.end() && it->second;
  };
  co.adamw = adam;
  const bool cuda = spec.device() == "cuda";
  co.lower = !cuda;  // the CUDA executor lowers the fused graph itself
  auto train = compiler::Compile(fw.train, co);
  if (!train.ok()) return Annotate(train.status(), "compiling the training step");
  t->train_ = std::move(*train);

  compiler::CompileOptions eo;
  eo.differentiate = false;
  eo.fuse = t->options_.fuse;
  auto eval = compiler::Compile(fw.eval, eo);
  if (!eval.ok()) return Annotate(eval.status(), "compiling the evaluation step");
  t->eval_ = std::move(*eval);
  if (cuda) {
    compiler::cuda::CudaOptions o;
    o.bf16 = tr.precision() == "bf16";
    auto exec = compiler::cuda::CudaExecutor::Create(t->train_.stages.at("fused"), o);
    if (!exec.ok()) return Annotate(exec.status(), "device: cuda: building the GPU training step");
    t->cuda_ = std::move(*exec);
  } else {
    LOOM_ASSIGN_OR_RETURN(t->train_exec_, MakeExecutor(t->train_));
  }
  LOOM_ASSIGN_OR_RETURN(t->eval_exec_, MakeExecutor(t->eval_));

  // Inputs of the training program, in its order: parameters (given or
  // initialised), optimizer state (zeros), the batch, lr and step.
  const compiler::Graph& g = t->train_graph();
  std::map<std::string, Tensor> init = std::move(fw.init);
  for (auto& [name, value] : t->options_.init) {
    auto it = init.find(name);
    if (it == init.end()) return absl::InvalidArgumentError(absl::StrCat("initial value for unknown parameter '", name, "'"));
    if (value.shape() != it->second.shape())
      return absl::InvalidArgumentError(absl::StrCat("initial value for '", name, "' has shape ",
                                                     ShapeToString(value.shape()), ", the model needs ",
                                                     ShapeToString(it->second.shape())));
    it->second = value.To(DType::kF32).Clone();
  }
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const auto& in = g.inputs()[k];
    const ops::TensorMeta& m = g.meta(in.value);
    auto it = init.find(in.name);
    if (it != init.end()) {
      t->train_inputs_.push_back(it->second);
    } else {
      t->train_inputs_.push_back(Tensor::Zeros(m.shape, m.dtype));
    }
    if (in.name == "x") t->x_in_ = static_cast<int>(k);
    if (in.name == "y") t->y_in_ = static_cast<int>(k);
    if (in.name == "lr") t->lr_in_ = static_cast<int>(k);
    if (in.name == "step") t->step_in_ = static_cast<int>(k);
    if (in.name == compiler::import::onnx::kDropoutStep) t->dropout_step_in_ = static_cast<int>(k);
  }
  if (t->x_in_ < 0 || t->y_in_ < 0 || t->lr_in_ < 0 || t->step_in_ < 0)
    return absl::InternalError("training program lacks one of the inputs x, y, lr, step");
  if (t->cuda_) {  // parameters and optimizer state live on the GPU from here on
    for (size_t k = 0; k < g.inputs().size(); ++k) {
      int ki = static_cast<int>(k);
      if (ki == t->x_in_ || ki == t->y_in_ || ki == t->lr_in_ || ki == t->step_in_) continue;
      LOOM_RETURN_IF_ERROR(Annotate(t->cuda_->SetInput(ki, t->train_inputs_[k]), "device: cuda: uploading inputs"));
    }
  }
  // The evaluation program shares the parameter tensors.
  const compiler::Graph& eg = t->eval_exec_->program().graph;
  for (size_t k = 0; k < eg.inputs().size(); ++k) {
    const auto& in = eg.inputs()[k];
    int tk = g.FindInput(in.name);
    if (tk < 0) return absl::InternalError(absl::StrCat("evaluation input '", in.name, "' is not a training input"));
    t->eval_inputs_.push_back(t->train_inputs_[tk]);
    if (in.name == "x") t->ex_in_ = static_cast<int>(k);
    if (in.name == "y") t->ey_in_ = static_cast<int>(k);
  }
  return t;
}

double Trainer::LearningRate(int64_t step) const { return compiler::ScheduledLearningRate(spec_.train(), step); }

absl::Status Trainer::CheckBatch(const Tensor& x, const Tensor& y) const {
  const compiler::Graph& g = train_graph();
  for (const auto& [k, t] : {std::pair<int, const Tensor*>{x_in_, &x}, {y_in_, &y}}) {
    const ops::TensorMeta& want = g.meta(g.inputs()[k].value);
    if (t->dtype() == want.dtype && t->shape() == want.shape) continue;
    return absl::InvalidArgumentError(absl::StrCat("the batch's ", g.inputs()[k].name, " is ", DTypeName(t->dtype()),
                                                   ShapeToString(t->shape()), "; the model takes ", want.ToString(),
                                                   " (data.* and model.* disagree)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> Trainer::Step(const Tensor& x, const Tensor& y) {
  LOOM_RETURN_IF_ERROR(CheckBatch(x, y));
  train_inputs_[x_in_] = x;
  train_inputs_[y_in_] = y;
  ++step_;
  train_inputs_[lr_in_].data<float>()[0] = static_cast<float>(LearningRate(step_));
  train_inputs_[step_in_].data<float>()[0] = static_cast<float>(step_);
  if (dropout_step_in_ >= 0) train_inputs_[dropout_step_in_].data<float>()[0] = static_cast<float>(step_);
  float loss = 0;
  if (cuda_) {  // parameters and state are updated in place on the device
    LOOM_RETURN_IF_ERROR(cuda_->Step({{x_in_, x}, {y_in_, y}, {lr_in_, train_inputs_[lr_in_]},
                                      {step_in_, train_inputs_[step_in_]}}));
    host_stale_ = true;
    LOOM_ASSIGN_OR_RETURN(Tensor l, cuda_->Output(0));
    loss = l.data<float>()[0];
    if (options_.keep_gradients) {  // the step's outputs: loss, then one gradient per parameter
      outputs_.assign(1, l);
      for (size_t i = 0; i < params_.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(Tensor g, cuda_->Output(static_cast<int>(1 + i)));
        outputs_.push_back(std::move(g));
      }
    }
  } else {
    LOOM_RETURN_IF_ERROR(train_exec_->Run(train_inputs_, &outputs_));
    loss = outputs_[0].data<float>()[0];
  }
  if (!std::isfinite(loss))
    return absl::AbortedError(absl::StrCat("loss is ", loss, " at step ", step_, "; stopping"));
  if (!cuda_) LOOM_RETURN_IF_ERROR(train_exec_->ApplyUpdates(absl::MakeSpan(train_inputs_), outputs_));
  return loss;
}

absl::StatusOr<Tensor> Trainer::DeviceLoss() {
  if (!cuda_) return absl::FailedPreconditionError("DeviceLoss: the trainer runs on the CPU (device: cpu)");
  LOOM_ASSIGN_OR_RETURN(Tensor l, cuda_->OutputDevice(0));
  if (l.dtype() != DType::kF32) return absl::InternalError("DeviceLoss: the loss is not stored in f32");
  return l;
}

absl::StatusOr<float> Trainer::ReadLoss() {
  if (!cuda_) return absl::FailedPreconditionError("ReadLoss: the trainer runs on the CPU (device: cpu)");
  LOOM_ASSIGN_OR_RETURN(Tensor l, cuda_->Output(0));
  return l.data<float>()[0];
}

const compiler::Graph& Trainer::train_graph() const {
  return cuda_ ? train_.stages.at("fused") : train_exec_->program().graph;
}

absl::Status Trainer::SyncFromDevice() const {
  if (!cuda_ || !host_stale_) return absl::OkStatus();
  // The parameters: the tensors the evaluation program shares (the AdamW
  // state stays on the device).
  const compiler::Graph& g = train_graph();
  for (const auto& p : params_) {
    const int k = g.FindInput(p.name);
    LOOM_ASSIGN_OR_RETURN(Tensor d, cuda_->Input(k));
    LOOM_RETURN_IF_ERROR(train_inputs_[k].CopyFrom(d));
  }
  host_stale_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::pair<float, Tensor>> Trainer::Forward(const Tensor& x, const Tensor& y) {
  LOOM_RETURN_IF_ERROR(CheckBatch(x, y));
  LOOM_RETURN_IF_ERROR(SyncFromDevice());
  eval_inputs_[ex_in_] = x;
  eval_inputs_[ey_in_] = y;
  std::vector<Tensor> out;
  LOOM_RETURN_IF_ERROR(eval_exec_->Run(eval_inputs_, &out));
  return std::make_pair(out[0].data<float>()[0], out.size() > 1 ? out[1] : Tensor());
}

absl::StatusOr<float> Trainer::Evaluate(const Tensor& x, const Tensor& y) {
  LOOM_ASSIGN_OR_RETURN(auto r, Forward(x, y));
  return r.first;
}

std::map<std::string, Tensor> Trainer::Parameters() const {
  std::map<std::string, Tensor> out;
  if (absl::Status s = SyncFromDevice(); !s.ok()) {
    std::fprintf(stderr, "loom: reading parameters back from the GPU: %s\n", std::string(s.message()).c_str());
    return out;
  }
  const compiler::Graph& g = train_graph();
  for (const auto& p : params_) out.emplace(p.name, train_inputs_[g.FindInput(p.name)]);
  return out;
}

std::map<std::string, Tensor> Trainer::LastGradients() const {
  std::map<std::string, Tensor> out;
  if (!options_.keep_gradients || outputs_.empty()) return out;
  // Outputs: forward outputs (1), then one gradient per parameter in order.
  for (size_t i = 0; i < params_.size() && 1 + i < outputs_.size(); ++i)
    out.emplace(params_[i].name, outputs_[1 + i].Clone());
  return out;
}

}  // namespace loom::train
