#include "parallel/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/rng.h"
#include "base/status.h"
#include "compiler/import/onnx/training.h"
#include "compiler/optimizer.h"
#include "compiler/schedule.h"

namespace loom::parallel {
namespace {

absl::StatusOr<std::unique_ptr<compiler::Executor>> MakeExecutor(compiler::Compilation& c) {
  if (!c.program) return absl::InternalError("compilation produced no program");
  return std::make_unique<compiler::Executor>(std::move(c.program));
}

compiler::AdamWOptions AdamWFor(const v1::TrainSpec& tr, const std::vector<compiler::models::ParamInfo>& params,
                                bool keep_gradients) {
  std::map<std::string, bool> decays;
  for (const auto& p : params) decays[p.name] = p.weight_decay;
  compiler::AdamWOptions adam;
  adam.beta1 = tr.beta1();
  adam.beta2 = tr.beta2();
  adam.eps = tr.eps();
  adam.weight_decay = tr.weight_decay();
  adam.max_norm = tr.grad_clip();
  adam.keep_gradients = keep_gradients;
  adam.decays = [decays](const std::string& name) {
    auto it = decays.find(name);
    return it != decays.end() && it->second;
  };
  return adam;
}

// A program input fed per step with data: neither the schedule's lr and step
// nor an imported model's dropout offset.
bool IsDataInput(const compiler::ir::GraphInput& in) {
  return in.kind == compiler::ir::InputKind::kInput && in.name != "lr" && in.name != "step" &&
         in.name != compiler::import::onnx::kDropoutStep;
}

std::string Names(const std::vector<std::string>& names) { return absl::StrJoin(names, ", "); }

// How the training step compiles (one rank or several; the parallel compile
// adds its communicators).
compiler::CompileOptions StepCompileOptions(const v1::JobSpec& spec,
                                            const std::vector<compiler::models::ParamInfo>& params,
                                            bool keep_gradients, bool fuse, bool accumulate) {
  const auto& tr = spec.train();
  compiler::CompileOptions co;
  co.fuse = fuse;
  // AdamW writes parameters and state in place: no arena copies of them and no
  // copy back after each step.
  co.lowering.in_place_updates = true;
  co.adamw = AdamWFor(tr, params, keep_gradients);
  if (accumulate) co.adamw.reset();  // the update program applies it
  co.lower = spec.device() != "cuda";  // the CUDA executor lowers the fused graph itself
  // train.activation_checkpointing (built-in families: their parameter names
  // give the blocks).
  if (const std::string& ac = tr.activation_checkpointing();
      (ac == "blocks" || ac == "selective") && spec.model().family() != "onnx") {
    co.checkpoint_blocks = compiler::models::BlockOfParameter;
    co.checkpoint_selective = ac == "selective";
  }
  return co;
}

}  // namespace

compiler::cuda::CudaOptions CudaStepOptions(const v1::JobSpec& spec) {
  compiler::cuda::CudaOptions o;
  o.bf16 = spec.train().precision() == "bf16";
  o.deterministic = spec.train().deterministic();
  o.f32_residual = o.bf16 && spec.train().residual_precision() == "f32";
  o.bf16_grads = o.bf16 && spec.train().grad_precision() == "bf16";
  if (spec.train().memory() == "lean") o.memory = compiler::cuda::CudaOptions::Memory::kLean;
  o.offload_optimizer_state = spec.train().offload_optimizer_state();
  return o;
}

absl::StatusOr<compiler::ir::Graph> CompileCudaStep(const v1::JobSpec& spec, const TrainerModel& model) {
  const compiler::CompileOptions co = StepCompileOptions(spec, model.params, false, true, false);
  const Layout layout = LayoutFromSpec(spec.parallel());
  if (MeshOf(layout).num_ranks() == 1) {
    auto train = compiler::Compile(model.train_forward, co);
    if (!train.ok()) return Annotate(train.status(), "compiling the training step");
    return std::move(train->stages.at("fused"));
  }
  auto train = CompileParallel(model.train_forward, co, spec.model(), spec.train().batch_size(), layout,
                               DpBucketBytes(spec));
  if (!train.ok()) return Annotate(train.status(), "compiling the parallel training step");
  return std::move(train->stages.at("fused"));
}

absl::StatusOr<CudaStepPlan> PlanCudaStep(const v1::JobSpec& spec, const TrainerModel& model) {
  CudaStepPlan out;
  LOOM_ASSIGN_OR_RETURN(out.step, CompileCudaStep(spec, model));
  const compiler::cuda::CudaOptions o = CudaStepOptions(spec);
  LOOM_ASSIGN_OR_RETURN(out.plan, compiler::cuda::PlanCuda(out.step, o.bf16, compiler::cuda::PlanOptionsFor(o)));
  return out;
}

absl::StatusOr<TrainerModel> FamilyModel(const v1::JobSpec& spec) {
  TrainerModel m;
  LOOM_ASSIGN_OR_RETURN(m.params, compiler::models::Parameters(spec.model()));
  compiler::models::BuildOptions bo = compiler::models::TrainingOptions(spec);
  // With train.grad_accum_steps the training graph takes one micro-batch.
  const int64_t accum = std::max(1, spec.train().grad_accum_steps());
  bo.batch /= accum;
  LOOM_ASSIGN_OR_RETURN(m.train_forward, compiler::models::BuildForward(spec.model(), bo));
  bo.batch *= accum;
  bo.dropout = 0;  // evaluation runs without dropout
  bo.return_logits = true;
  LOOM_ASSIGN_OR_RETURN(m.eval_forward, compiler::models::BuildForward(spec.model(), bo));
  m.sample_forward = [model = spec.model(), bo](int64_t rows) mutable {
    bo.batch = rows;
    return compiler::models::BuildForward(model, bo);
  };
  return m;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const v1::JobSpec& spec, TrainerOptions options) {
  LOOM_ASSIGN_OR_RETURN(TrainerModel model, FamilyModel(spec));
  return Create(spec, std::move(model), std::move(options));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const v1::JobSpec& spec, TrainerModel model,
                                                         TrainerOptions options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  t->layout_ = options.layout;
  t->mesh_ = MeshOf(options.layout);
  t->rank_ = options.rank;
  if (t->rank_ < 0 || t->rank_ >= t->mesh_.num_ranks())
    return absl::InvalidArgumentError(absl::StrCat("rank ", t->rank_, " is outside the mesh ", t->mesh_.ToString()));
  t->coords_ = t->mesh_.Coordinates(t->rank_);
  t->accum_ = std::max(1, spec.train().grad_accum_steps());
  if (!t->single() && options.keep_gradients && t->accum_ == 1)
    return absl::InvalidArgumentError(
        "keep_gradients: only a one-rank trainer or one that accumulates gradients keeps its gradients");
  if (t->accum_ > 1 && spec.device() == "cuda")
    return absl::InvalidArgumentError(absl::StrCat("train.grad_accum_steps: ", t->accum_,
                                                   " runs on device: cpu for now (device: ", spec.device(), ")"));
  t->options_ = std::move(options);
  t->params_ = model.params;
  t->has_logits_ = model.has_logits;
  if (model.has_logits) t->sample_forward_ = std::move(model.sample_forward);
  LOOM_RETURN_IF_ERROR(t->CompileSteps(model));
  LOOM_RETURN_IF_ERROR(t->BindTrainingInputs(model));
  if (t->accum_ > 1) LOOM_RETURN_IF_ERROR(t->BindUpdate());
  LOOM_RETURN_IF_ERROR(t->BindEval(t->eval_));
  // The initial values are bound; hold no second reference to them.
  t->options_.init.clear();
  t->options_.init_blocks = nullptr;
  return t;
}

absl::Status Trainer::CompileSteps(TrainerModel& model) {
  const auto& tr = spec_.train();
  const bool cuda = spec_.device() == "cuda";
  compiler::CompileOptions co = StepCompileOptions(spec_, params_, options_.keep_gradients, options_.fuse, accum_ > 1);
  co.autodiff.seed = options_.loss_seed;
  if (single()) {
    auto train = compiler::Compile(model.train_forward, co);
    if (!train.ok()) return Annotate(train.status(), "compiling the training step");
    train_ = std::move(*train);
    LOOM_ASSIGN_OR_RETURN(eval_, CompileEval(model.eval_forward));
  } else {
    co.lowering.communicators = options_.comms;
    const int64_t bucket = options_.bucket_bytes > 0 ? options_.bucket_bytes : DpBucketBytes(spec_);
    auto train = CompileParallel(model.train_forward, co, spec_.model(), tr.batch_size(), layout_, bucket);
    if (!train.ok()) return Annotate(train.status(), "compiling the parallel training step");
    train_ = std::move(*train);
    // Validation needs the loss only: the logits stay sharded (and are not
    // an output) until Forward asks for them.
    compiler::ir::Graph loss_only = model.eval_forward;
    loss_only.mutable_outputs().resize(1);
    LOOM_ASSIGN_OR_RETURN(eval_, CompileEval(loss_only));
    if (model.has_logits) logits_forward_ = std::move(model.eval_forward);
  }
  if (cuda) {  // the fused graph (on several ranks the localized one, with its collectives)
    const compiler::ir::Graph& fused = train_.stages.at("fused");
    compiler::cuda::CudaOptions o = CudaStepOptions(spec_);
    o.device = options_.cuda_device;
    o.communicators = options_.comms;
    auto exec = options_.make_cuda_executor ? options_.make_cuda_executor(fused, o)
                                            : compiler::cuda::CudaExecutor::Create(fused, o);
    if (!exec.ok()) return Annotate(exec.status(), "device: cuda: building the GPU training step");
    cuda_ = std::move(*exec);
  } else {
    LOOM_ASSIGN_OR_RETURN(train_exec_, MakeExecutor(train_));
  }
  if (accum_ > 1) LOOM_RETURN_IF_ERROR(CompileUpdate(AdamWFor(tr, params_, options_.keep_gradients && !single())));
  return absl::OkStatus();
}

absl::StatusOr<Trainer::EvalProgram> Trainer::CompileEval(const compiler::ir::Graph& forward, int64_t batch) const {
  compiler::CompileOptions eo;
  eo.differentiate = false;
  eo.fuse = options_.fuse;
  EvalProgram p;
  if (single()) {
    auto c = compiler::Compile(forward, eo);
    if (!c.ok()) return Annotate(c.status(), "compiling the evaluation step");
    p.compilation = std::move(*c);
  } else {
    eo.lowering.communicators = options_.comms;
    auto c = CompileParallel(forward, eo, spec_.model(), batch > 0 ? batch : spec_.train().batch_size(), layout_);
    if (!c.ok()) return Annotate(c.status(), "compiling the parallel evaluation step");
    p.compilation = std::move(*c);
  }
  LOOM_ASSIGN_OR_RETURN(p.exec, MakeExecutor(p.compilation));
  return p;
}

absl::StatusOr<Tensor> Trainer::Block(const Tensor& global, const dtensor::DTensorSpec& spec) const {
  std::vector<int64_t> shape(global.shape().begin(), global.shape().end());
  LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(shape, spec, coords_));
  Tensor t = global;
  for (size_t d = 0; d < ranges.size(); ++d) t = t.Narrow(static_cast<int>(d), ranges[d].offset, ranges[d].length);
  return t.Clone();
}

absl::StatusOr<Tensor> Trainer::InitBlock(size_t index, const dtensor::DTensorSpec& spec) const {
  // Element e (row-major in the global tensor) of parameter `index` is
  // init_std * Philox(seed, index).Normal(e), or init_value: exactly
  // compiler::models::InitParameters, evaluated only at this rank's block.
  // One rank holds the whole tensor: drawn by every core (the same values).
  if (single())
    return compiler::models::InitParameter(params_, index, spec_.train().seed(),
                                           static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const compiler::models::ParamInfo& p = params_[index];
  std::vector<int64_t> shape(p.shape.begin(), p.shape.end());
  LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(shape, spec, coords_));
  std::vector<int64_t> local_shape;
  for (const auto& r : ranges) local_shape.push_back(r.length);
  LOOM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(local_shape, DType::kF32));
  float* v = t.data<float>();
  const Philox rng(spec_.train().seed(), index);
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> idx(nd, 0);
  for (int64_t k = 0; k < t.numel(); ++k) {
    int64_t e = 0;
    for (int d = 0; d < nd; ++d) e = e * shape[d] + ranges[d].offset + idx[d];
    v[k] = static_cast<float>(p.init_std > 0 ? p.init_std * rng.Normal(static_cast<uint64_t>(e)) : p.init_value);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < local_shape[d]) break;
      idx[d] = 0;
    }
  }
  return t;
}

namespace {

// The spec of input `name` of a localized program ("parallel" stage), or
// replicated when the compilation has no such stage (one rank).
absl::StatusOr<dtensor::DTensorSpec> InputSpec(const compiler::Compilation& c, const std::string& name,
                                               const dtensor::MeshShape& mesh) {
  auto it = c.stages.find("parallel");
  if (it == c.stages.end()) return dtensor::DTensorSpec::Replicated(mesh);
  const compiler::ir::Graph& local = it->second;
  const int k = local.FindInput(name);
  if (k < 0) return absl::InternalError(absl::StrCat("program input '", name, "' is not in the parallel graph"));
  return dtensor::ParseSpec(local.value(local.inputs()[k].value).placement, mesh);
}

// The global meta of input `name`: the graph before localization.
const kernels::TensorMeta& GlobalMeta(const compiler::Compilation& c, const compiler::ir::Graph& program,
                                      const std::string& name) {
  auto it = c.stages.find("parallel");
  if (it == c.stages.end()) return program.meta(program.inputs()[program.FindInput(name)].value);
  const compiler::ir::Graph& g = c.stages.at("joint");
  return g.meta(g.inputs()[g.FindInput(name)].value);
}

}  // namespace

absl::StatusOr<Tensor> Trainer::ReadInitBlock(size_t index, const dtensor::DTensorSpec& spec) const {
  const compiler::models::ParamInfo& p = params_[index];
  std::vector<int64_t> shape(p.shape.begin(), p.shape.end());
  LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(shape, spec, coords_));
  std::vector<int64_t> offsets, lengths;
  for (const auto& r : ranges) {
    offsets.push_back(r.offset);
    lengths.push_back(r.length);
  }
  if (std::find(lengths.begin(), lengths.end(), 0) != lengths.end())
    return Tensor::Empty(Shape(lengths.begin(), lengths.end()), DType::kF32);
  LOOM_ASSIGN_OR_RETURN(Tensor block, options_.init_blocks(p.name, offsets, lengths));
  if (block.shape() != Shape(lengths.begin(), lengths.end()))
    return absl::InternalError(absl::StrCat("initial block of '", p.name, "' has shape ", ShapeToString(block.shape()),
                                            ", expected ", ShapeToString(Shape(lengths.begin(), lengths.end()))));
  return block.To(DType::kF32);
}

absl::StatusOr<Tensor> Trainer::InitialValue(const compiler::ir::GraphInput& in, const kernels::TensorMeta& local,
                                             const dtensor::DTensorSpec& spec, const TrainerModel& model,
                                             const std::map<std::string, size_t>& param_index) const {
  auto pi = param_index.find(in.name);
  if (pi != param_index.end() && options_.init_blocks) return ReadInitBlock(pi->second, spec);
  auto given = options_.init.find(in.name);
  if (given != options_.init.end()) {
    if (single()) return given->second.To(DType::kF32).Clone();
    return Block(given->second.To(DType::kF32), spec);
  }
  auto initial = model.initial.find(in.name);
  if (initial != model.initial.end()) {  // parameters become f32; an imported model's buffers keep their dtype
    const Tensor value = pi != param_index.end() ? initial->second.To(DType::kF32) : initial->second;
    if (single()) return value;
    return Block(value, spec);
  }
  if (pi != param_index.end()) return InitBlock(pi->second, spec);
  return Tensor::Zeros(local.shape, local.dtype);
}

absl::Status Trainer::BindTrainingInputs(TrainerModel& model) {
  std::map<std::string, size_t> param_index;
  for (size_t i = 0; i < params_.size(); ++i) param_index[params_[i].name] = i;
  for (const auto& [name, value] : options_.init) {
    auto pi = param_index.find(name);
    if (pi == param_index.end())
      return absl::InvalidArgumentError(absl::StrCat("initial value for unknown parameter '", name, "'"));
    if (value.shape() != params_[pi->second].shape)
      return absl::InvalidArgumentError(absl::StrCat("initial value for '", name, "' has shape ",
                                                     ShapeToString(value.shape()), ", the model needs ",
                                                     ShapeToString(params_[pi->second].shape)));
  }
  // Inputs of the training program, in its order: parameters (given or
  // initialised), buffers, optimizer state (zeros), the batch, lr and step.
  const compiler::ir::Graph& g = train_graph();
  std::vector<bool> zero_state;  // per input
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const compiler::ir::GraphInput& in = g.inputs()[k];
    const int ki = static_cast<int>(k);
    LOOM_ASSIGN_OR_RETURN(dtensor::DTensorSpec s, InputSpec(train_, in.name, mesh_));
    specs_[in.name] = s;
    // Optimizer state that starts at zero: a CUDA executor fills it on the
    // device, so no host zeros are made for it.
    zero_state.push_back(in.kind == compiler::ir::InputKind::kState && !param_index.count(in.name) &&
                         !options_.init.count(in.name) && !model.initial.count(in.name));
    if (zero_state.back() && cuda_) {
      train_inputs_.emplace_back();
    } else {
      LOOM_ASSIGN_OR_RETURN(Tensor value, InitialValue(in, g.meta(in.value), s, model, param_index));
      train_inputs_.push_back(std::move(value));
    }
    if (in.name == "lr") lr_in_ = ki;
    if (in.name == "step") step_in_ = ki;
    if (in.name == compiler::import::onnx::kDropoutStep) dropout_step_in_ = ki;
    if (IsDataInput(in)) {
      const kernels::TensorMeta& gm = GlobalMeta(train_, g, in.name);
      train_data_.push_back({in.name, ki, gm.shape, gm.dtype});
    }
  }
  if ((accum_ == 1 && (lr_in_ < 0 || step_in_ < 0)) || train_data_.empty())
    return absl::InternalError("training program lacks one of the inputs lr, step or any data input");
  LOOM_ASSIGN_OR_RETURN(rows_, RowsOf(train_data_, specs_));
  // One update's rows: the micro-step's program holds one micro-batch of
  // this rank's block.
  rows_.first *= accum_;
  rows_.second *= accum_;
  if (cuda_) {  // parameters, buffers and optimizer state live on the GPU from here on
    for (size_t k = 0; k < g.inputs().size(); ++k) {
      const int ki = static_cast<int>(k);
      if (ki == lr_in_ || ki == step_in_ || IsDataInput(g.inputs()[k])) continue;
      LOOM_RETURN_IF_ERROR(Annotate(zero_state[k] ? cuda_->ZeroInput(ki) : cuda_->SetInput(ki, train_inputs_[k]),
                                    "device: cuda: uploading inputs"));
      // The host keeps no copy of the optimizer state (twice the parameters'
      // bytes): checkpoints read it back a tensor at a time (ReadState).
      if (g.inputs()[k].kind == compiler::ir::InputKind::kState) train_inputs_[k] = Tensor();
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::BindEval(EvalProgram& p, bool same_rows) const {
  // The evaluation program shares the parameter and buffer tensors, which
  // it needs under the same spec as the training program.
  const compiler::ir::Graph& g = train_graph();
  const compiler::ir::Graph& eg = p.exec->program().graph;
  for (size_t k = 0; k < eg.inputs().size(); ++k) {
    const compiler::ir::GraphInput& in = eg.inputs()[k];
    const int tk = g.FindInput(in.name);
    if (tk < 0)
      return absl::InternalError(absl::StrCat("evaluation input '", in.name, "' is not a training input"));
    LOOM_ASSIGN_OR_RETURN(dtensor::DTensorSpec s, InputSpec(p.compilation, in.name, mesh_));
    p.specs[in.name] = s;
    if (IsDataInput(in)) {
      const kernels::TensorMeta& gm = GlobalMeta(p.compilation, eg, in.name);
      p.data.push_back({in.name, static_cast<int>(k), gm.shape, gm.dtype});
    } else if (!(s == specs_.at(in.name))) {
      return absl::InternalError(absl::StrCat("evaluation input '", in.name, "' is ", s.ToString(),
                                              " but the training step holds it as ", specs_.at(in.name).ToString()));
    }
    p.inputs.push_back(train_inputs_[tk]);
  }
  LOOM_ASSIGN_OR_RETURN(auto rows, RowsOf(p.data, p.specs));
  if (same_rows && !p.data.empty() && rows != rows_)
    return absl::InternalError("the evaluation program splits the batch into other rows than the training step");
  return absl::OkStatus();
}

absl::StatusOr<std::pair<int64_t, int64_t>> Trainer::RowsOf(
    const std::vector<DataInput>& data, const std::map<std::string, dtensor::DTensorSpec>& specs) const {
  std::pair<int64_t, int64_t> rows{-1, -1};
  for (const DataInput& d : data) {
    if (d.global_shape.empty()) continue;  // a scalar input is whole on every rank
    std::vector<int64_t> shape(d.global_shape.begin(), d.global_shape.end());
    LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(shape, specs.at(d.name), coords_));
    const std::pair<int64_t, int64_t> mine{ranges[0].offset, ranges[0].length};
    if (rows.second >= 0 && mine != rows)
      return absl::InternalError(absl::StrCat("data input '", d.name, "' splits the batch into other rows than ",
                                              "the program's other data inputs"));
    rows = mine;
  }
  if (rows.second < 0) return std::make_pair(int64_t{0}, int64_t{0});
  return rows;
}

double Trainer::LearningRate(int64_t step) const { return compiler::ScheduledLearningRate(spec_.train(), step); }

absl::Status Trainer::SetBatch(const Batch& batch, bool rows, const std::vector<DataInput>& want,
                               const std::map<std::string, dtensor::DTensorSpec>& specs, std::vector<Tensor>& inputs) {
  if (batch.size() != want.size() || !std::all_of(want.begin(), want.end(), [&](const DataInput& d) {
        return batch.count(d.name) > 0;
      })) {
    std::vector<std::string> need, got;
    for (const DataInput& d : want) need.push_back(d.name);
    for (const auto& [name, t] : batch) got.push_back(name);
    return absl::InvalidArgumentError(
        absl::StrCat("batch: the program's data inputs are {", Names(need), "}, the batch has {", Names(got), "}"));
  }
  for (const DataInput& d : want) {
    const Tensor& t = batch.at(d.name);
    Shape need = d.global_shape;
    const bool row_block = rows && !need.empty();
    // The training program takes one micro-batch of this rank's rows.
    if (row_block) need[0] = &want == &train_data_ ? rows_.second / accum_ : rows_.second;
    if (t.shape() != need || t.dtype() != d.dtype)
      return absl::InvalidArgumentError(absl::StrCat(
          "batch: input '", d.name, "' is ", DTypeName(t.dtype()), ShapeToString(t.shape()), ", the program needs ",
          DTypeName(d.dtype), ShapeToString(need), row_block ? " (this rank's rows)" : "",
          " (data.* and model.* disagree)"));
    if (single()) {
      inputs[d.index] = t;
    } else if (!row_block) {
      LOOM_ASSIGN_OR_RETURN(inputs[d.index], Block(t, specs.at(d.name)));
    } else {  // this rank's rows already: narrow the other dims to its block
      std::vector<int64_t> shape(d.global_shape.begin(), d.global_shape.end());
      LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(shape, specs.at(d.name), coords_));
      Tensor b = t;
      for (size_t k = 1; k < ranges.size(); ++k)
        b = b.Narrow(static_cast<int>(k), ranges[k].offset, ranges[k].length);
      inputs[d.index] = b.Clone();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float> Trainer::Step(const Batch& batch) {
  if (accum_ > 1) return AccumulateStep(batch, /*rows=*/false);
  LOOM_RETURN_IF_ERROR(SetBatch(batch, /*rows=*/false, train_data_, specs_, train_inputs_));
  return RunStep();
}

absl::StatusOr<float> Trainer::StepRows(const Batch& rows) {
  if (accum_ > 1) return AccumulateStep(rows, /*rows=*/true);
  LOOM_RETURN_IF_ERROR(SetBatch(rows, /*rows=*/true, train_data_, specs_, train_inputs_));
  return RunStep();
}

absl::StatusOr<float> Trainer::RunStep() {
  ++step_;
  train_inputs_[lr_in_].data<float>()[0] = static_cast<float>(LearningRate(step_));
  train_inputs_[step_in_].data<float>()[0] = static_cast<float>(step_);
  if (dropout_step_in_ >= 0) train_inputs_[dropout_step_in_].data<float>()[0] = static_cast<float>(step_);
  float loss = 0;
  if (cuda_) {  // parameters and state are updated in place on the device
    std::vector<std::pair<int, Tensor>> step_inputs;
    for (const DataInput& d : train_data_) step_inputs.emplace_back(d.index, train_inputs_[d.index]);
    step_inputs.emplace_back(lr_in_, train_inputs_[lr_in_]);
    step_inputs.emplace_back(step_in_, train_inputs_[step_in_]);
    LOOM_RETURN_IF_ERROR(cuda_->Step(step_inputs));
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

int64_t Trainer::ArenaBytes() const {
  return train_exec_ ? train_exec_->program().plan.peak_bytes : train_.plan.peak_bytes;
}

const compiler::ir::Graph& Trainer::train_graph() const {
  return cuda_ ? train_.stages.at("fused") : train_exec_->program().graph;
}

absl::Status Trainer::SyncFromDevice() const {
  if (!cuda_ || !host_stale_) return absl::OkStatus();
  // The parameters: the tensors the evaluation program shares (the AdamW
  // state stays on the device).
  const compiler::ir::Graph& g = train_graph();
  for (const auto& p : params_) {
    const int k = g.FindInput(p.name);
    LOOM_ASSIGN_OR_RETURN(Tensor d, cuda_->Input(k));
    LOOM_RETURN_IF_ERROR(train_inputs_[k].CopyFrom(d));
  }
  host_stale_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Trainer::RunEval(EvalProgram& p, const Batch& batch, bool rows) {
  LOOM_RETURN_IF_ERROR(SyncFromDevice());
  LOOM_RETURN_IF_ERROR(SetBatch(batch, rows, p.data, p.specs, p.inputs));
  std::vector<Tensor> out;
  LOOM_RETURN_IF_ERROR(p.exec->Run(p.inputs, &out));
  return out;
}

absl::StatusOr<std::pair<float, Tensor>> Trainer::Forward(const Batch& batch) {
  EvalProgram* p = &eval_;
  if (!single() && has_logits_) {
    if (!logits_) {
      LOOM_ASSIGN_OR_RETURN(EvalProgram compiled, CompileEval(logits_forward_));
      LOOM_RETURN_IF_ERROR(BindEval(compiled));
      logits_ = std::make_unique<EvalProgram>(std::move(compiled));
    }
    p = logits_.get();
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out, RunEval(*p, batch, /*rows=*/false));
  return std::make_pair(out[0].data<float>()[0], out.size() > 1 ? out[1] : Tensor());
}

int64_t Trainer::SampleRows() const {
  const int64_t batch = spec_.train().batch_size(), rows = std::max(1, layout_.dp);
  return sample_forward_ && rows < batch ? rows : batch;
}

absl::StatusOr<Tensor> Trainer::SampleLogits(const Tensor& x) {
  const Tensor y = Tensor::Zeros(x.shape(), DType::kI32);
  const int64_t rows = SampleRows();
  if (rows == spec_.train().batch_size()) {
    LOOM_ASSIGN_OR_RETURN(auto out, Forward(x, y));
    return out.second;
  }
  if (!sample_) {
    LOOM_ASSIGN_OR_RETURN(compiler::ir::Graph forward, sample_forward_(rows));
    LOOM_ASSIGN_OR_RETURN(EvalProgram compiled, CompileEval(forward, rows));
    LOOM_RETURN_IF_ERROR(BindEval(compiled, /*same_rows=*/false));
    sample_ = std::make_unique<EvalProgram>(std::move(compiled));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out, RunEval(*sample_, Batch{{"x", x}, {"y", y}}, /*rows=*/false));
  return out[1];
}

absl::StatusOr<float> Trainer::Evaluate(const Batch& batch) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out, RunEval(eval_, batch, /*rows=*/false));
  return out[0].data<float>()[0];
}

absl::StatusOr<float> Trainer::EvaluateRows(const Batch& rows) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> out, RunEval(eval_, rows, /*rows=*/true));
  return out[0].data<float>()[0];
}

std::map<std::string, Tensor> Trainer::LocalParameters() const {
  std::map<std::string, Tensor> out;
  if (absl::Status s = SyncFromDevice(); !s.ok()) {
    std::fprintf(stderr, "loom: reading parameters back from the GPU: %s\n", std::string(s.message()).c_str());
    return out;
  }
  const compiler::ir::Graph& g = train_graph();
  for (const auto& p : params_) out.emplace(p.name, train_inputs_[g.FindInput(p.name)]);
  return out;
}

std::map<std::string, Tensor> Trainer::LastGradients() const {
  std::map<std::string, Tensor> out;
  if (!options_.keep_gradients || outputs_.empty()) return out;
  if (accum_ > 1 && single()) {
    for (size_t i = 0; i < params_.size(); ++i) out.emplace(params_[i].name, update_.accumulators[i].Clone());
    return out;
  }
  if (accum_ > 1) {  // the update program's outputs: the reduced mean gradients, whole, then the updates
    for (size_t i = 0; i < params_.size() && i < update_.outputs.size(); ++i)
      out.emplace(params_[i].name, update_.outputs[i].Clone());
    return out;
  }
  // Outputs: forward outputs (1), then one gradient per parameter in order.
  for (size_t i = 0; i < params_.size() && 1 + i < outputs_.size(); ++i)
    out.emplace(params_[i].name, outputs_[1 + i].Clone());
  return out;
}

std::vector<int> Trainer::DeviceStateInputs() const {
  std::vector<int> out;
  const compiler::ir::Graph& g = train_graph();
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const compiler::ir::InputKind kind = g.inputs()[k].kind;
    if (kind == compiler::ir::InputKind::kParam || kind == compiler::ir::InputKind::kState)
      out.push_back(static_cast<int>(k));
  }
  return out;
}

std::vector<Trainer::StateTensor> Trainer::StateEntries(bool with_data) const {
  std::vector<StateTensor> out;
  const compiler::ir::Graph& g = train_graph();
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const compiler::ir::GraphInput& in = g.inputs()[k];
    if (in.kind != compiler::ir::InputKind::kParam && in.kind != compiler::ir::InputKind::kState) continue;
    StateTensor st;
    st.name = in.name;
    st.is_param = in.kind == compiler::ir::InputKind::kParam;
    st.dtype = g.meta(in.value).dtype;
    const Shape& shape = GlobalMeta(train_, g, in.name).shape;
    st.global_shape.assign(shape.begin(), shape.end());
    st.spec = specs_.at(in.name);
    if (with_data) st.local = train_inputs_[k];
    out.push_back(std::move(st));
  }
  if (accum_ > 1) {  // the moments live in the update program
    const compiler::ir::Graph& ug = update_.exec->program().graph;
    for (size_t k = 0; k < ug.inputs().size(); ++k) {
      const compiler::ir::GraphInput& in = ug.inputs()[k];
      if (in.kind != compiler::ir::InputKind::kState) continue;
      StateTensor st;
      st.name = in.name;
      st.dtype = ug.meta(in.value).dtype;
      const Shape& shape = GlobalMeta(update_.compilation, ug, in.name).shape;
      st.global_shape.assign(shape.begin(), shape.end());
      st.spec = specs_.at(in.name);
      if (with_data) st.local = update_.inputs[k];
      out.push_back(std::move(st));
    }
  }
  return out;
}

absl::StatusOr<Tensor> Trainer::ReadState(const std::string& name) const {
  const int k = train_graph().FindInput(name);
  if (!cuda_ || k < 0)
    return absl::FailedPreconditionError(absl::StrCat("ReadState: '", name, "' is not a GPU-resident state input"));
  absl::StatusOr<Tensor> t = cuda_->Input(k);
  if (!t.ok()) return Annotate(t.status(), absl::StrCat("device: cuda: reading ", name, " back"));
  return t;
}

absl::Status Trainer::WriteState(const std::string& name, const Tensor& local) {
  const int k = train_graph().FindInput(name);
  if (!cuda_ || k < 0)
    return absl::FailedPreconditionError(absl::StrCat("WriteState: '", name, "' is not a GPU-resident state input"));
  LOOM_RETURN_IF_ERROR(Annotate(cuda_->SetInput(k, local), absl::StrCat("device: cuda: uploading ", name)));
  host_stale_ = true;  // the host copy of the parameters (evaluation's) is behind now
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Trainer::StateTensor>> Trainer::State() const {
  if (cuda_) {  // device -> host, into the tensors returned below
    for (int k : DeviceStateInputs()) {
      auto d = cuda_->Input(k);
      if (!d.ok()) return Annotate(d.status(), "device: cuda: reading the training state back");
      if (!train_inputs_[k].defined()) {
        train_inputs_[k] = std::move(*d);
        continue;
      }
      LOOM_RETURN_IF_ERROR(train_inputs_[k].CopyFrom(*d));
    }
    host_stale_ = false;
  }
  return StateEntries(/*with_data=*/true);
}

absl::Status Trainer::StateChanged() {
  if (!cuda_) return absl::OkStatus();  // State()'s tensors are the program's own
  for (int k : DeviceStateInputs())
    LOOM_RETURN_IF_ERROR(Annotate(cuda_->SetInput(k, train_inputs_[k]), "device: cuda: uploading the training state"));
  host_stale_ = false;
  return absl::OkStatus();
}

}  // namespace loom::parallel
