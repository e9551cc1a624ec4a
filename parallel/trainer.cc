#include "parallel/trainer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "base/status.h"
#include "compiler/import/onnx/training.h"
#include "compiler/optimizer.h"
#include "compiler/schedule.h"

namespace loom::parallel {

absl::StatusOr<Tensor> ParallelTrainer::Block(const Tensor& global, const dtensor::DTensorSpec& spec) const {
  std::vector<int64_t> shape(global.shape().begin(), global.shape().end());
  LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(shape, spec, coords_));
  Tensor t = global;
  for (size_t d = 0; d < ranges.size(); ++d) t = t.Narrow(static_cast<int>(d), ranges[d].offset, ranges[d].length);
  return t.Clone();
}

absl::StatusOr<Tensor> ParallelTrainer::InitBlock(size_t index, uint64_t seed,
                                                  const dtensor::DTensorSpec& spec) const {
  // Element e (row-major in the global tensor) of parameter `index` is
  // init_std * Philox(seed, index).Normal(e), or init_value: exactly
  // models::InitParameters, evaluated only at this rank's block.
  const models::ParamInfo& p = params_[index];
  std::vector<int64_t> shape(p.shape.begin(), p.shape.end());
  LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(shape, spec, coords_));
  std::vector<int64_t> local_shape;
  for (const auto& r : ranges) local_shape.push_back(r.length);
  LOOM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(local_shape, DType::kF32));
  float* v = t.data<float>();
  const Philox rng(seed, index);
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

absl::StatusOr<std::unique_ptr<ParallelTrainer>> ParallelTrainer::Create(const v1::JobSpec& spec,
                                                                         const Layout& layout, int rank,
                                                                         compiler::CommunicatorMap comms,
                                                                         ParallelTrainerOptions options) {
  std::unique_ptr<ParallelTrainer> t(new ParallelTrainer());
  t->spec_ = spec;
  t->layout_ = layout;
  t->mesh_ = MeshOf(layout);
  if (rank < 0 || rank >= t->mesh_.num_ranks())
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside the mesh ", t->mesh_.ToString()));
  t->coords_ = t->mesh_.Coordinates(rank);
  const auto& tr = spec.train();
  const ImportedForward* imported = options.imported;
  if ((spec.model().family() == "onnx") != (imported != nullptr))
    return absl::InvalidArgumentError("ParallelTrainer: an ONNX model (model.family onnx) comes as options.imported");
  compiler::Graph forward;
  if (imported != nullptr) {
    t->params_ = imported->params;
    forward = imported->forward;
  } else {
    LOOM_ASSIGN_OR_RETURN(t->params_, models::Parameters(spec.model()));
    LOOM_ASSIGN_OR_RETURN(forward, models::BuildForward(spec.model(), models::TrainingOptions(spec)));
  }
  std::map<std::string, bool> decays;
  for (const auto& p : t->params_) decays[p.name] = p.weight_decay;
  compiler::CompileOptions co;
  co.fuse = options.fuse;
  co.lowering.in_place_updates = true;
  co.lowering.communicators = std::move(comms);
  compiler::AdamWOptions adam;
  adam.beta1 = tr.beta1();
  adam.beta2 = tr.beta2();
  adam.eps = tr.eps();
  adam.weight_decay = tr.weight_decay();
  adam.max_norm = tr.grad_clip();
  adam.decays = [decays](const std::string& name) {
    auto it = decays.find(name);
    return it != decays.end() && it->second;
  };
  co.adamw = adam;
  if (const std::string& ac = tr.activation_checkpointing(); (ac == "blocks" || ac == "selective") && !imported) {
    co.checkpoint_blocks = models::BlockOfParameter;
    co.checkpoint_selective = ac == "selective";
  }
  auto c = CompileParallel(forward, co, spec.model(), tr.batch_size(), layout, options.bucket_bytes);
  if (!c.ok()) return Annotate(c.status(), "compiling the parallel training step");
  t->c_ = std::move(*c);
  if (!t->c_.program) return absl::InternalError("compilation produced no program");
  const compiler::Graph local = t->c_.stages.at("parallel");
  t->exec_ = std::make_unique<compiler::Executor>(std::move(t->c_.program));
  const compiler::Graph& g = t->exec_->program().graph;

  // Parameters from train.seed are generated block by block (InitBlock), so a
  // rank never holds the full global tensors; options.init overrides by name.
  std::map<std::string, size_t> param_index;
  for (size_t i = 0; i < t->params_.size(); ++i) param_index[t->params_[i].name] = i;
  for (const auto& [name, value] : options.init)
    if (!param_index.count(name))
      return absl::InvalidArgumentError(absl::StrCat("initial value for unknown parameter '", name, "'"));
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const auto& in = g.inputs()[k];
    const int lk = local.FindInput(in.name);
    if (lk < 0) return absl::InternalError(absl::StrCat("program input '", in.name, "' is not in the parallel graph"));
    LOOM_ASSIGN_OR_RETURN(auto s, dtensor::ParseSpec(local.value(local.inputs()[lk].value).placement, t->mesh_));
    t->specs_[in.name] = s;
    const ops::TensorMeta& m = g.meta(in.value);
    auto pi = param_index.find(in.name);
    const Tensor* given = nullptr;  // options.init, else the imported model's initial values
    if (auto it = options.init.find(in.name); it != options.init.end()) {
      given = &it->second;
    } else if (imported != nullptr) {
      if (auto im = imported->initial.find(in.name); im != imported->initial.end()) given = &im->second;
    }
    if (given != nullptr) {  // parameters become f32; an imported model's buffers keep their dtype
      LOOM_ASSIGN_OR_RETURN(Tensor b, t->Block(pi != param_index.end() ? given->To(DType::kF32) : *given, s));
      t->inputs_.push_back(b);
    } else if (pi != param_index.end() && imported != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("imported parameter '", in.name, "' has no initial value"));
    } else if (pi != param_index.end()) {
      LOOM_ASSIGN_OR_RETURN(Tensor b, t->InitBlock(pi->second, tr.seed(), s));
      t->inputs_.push_back(b);
    } else {
      t->inputs_.push_back(Tensor::Zeros(m.shape, m.dtype));
    }
    if (in.name == "x") t->x_in_ = static_cast<int>(k);
    if (in.name == "y") t->y_in_ = static_cast<int>(k);
    if (in.name == "lr") t->lr_in_ = static_cast<int>(k);
    if (in.name == "step") t->step_in_ = static_cast<int>(k);
    if (in.name == compiler::import::onnx::kDropoutStep) t->dropout_step_in_ = static_cast<int>(k);
  }
  if (t->x_in_ < 0 || t->y_in_ < 0 || t->lr_in_ < 0 || t->step_in_ < 0)
    return absl::InternalError("training program lacks one of the inputs x, y, lr, step");
  return t;
}

std::pair<int64_t, int64_t> ParallelTrainer::BatchRows() const {
  auto ranges = dtensor::LocalBlock({spec_.train().batch_size(), spec_.model().seq_len()}, specs_.at("x"), coords_);
  return ranges.ok() ? std::make_pair((*ranges)[0].offset, (*ranges)[0].length) : std::make_pair(int64_t{0}, int64_t{0});
}

absl::StatusOr<Tensor> ParallelTrainer::RowsBlock(const Tensor& rows, const std::string& name) const {
  const int64_t B = spec_.train().batch_size(), T = spec_.model().seq_len();
  LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock({B, T}, specs_.at(name), coords_));
  if (rows.ndim() != 2 || rows.shape()[0] != ranges[0].length || rows.shape()[1] != T)
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected this rank's ", ranges[0].length,
                                                   " rows of the global batch, [", ranges[0].length, ", ", T,
                                                   "], got ", rows.DebugString()));
  return rows.Narrow(1, ranges[1].offset, ranges[1].length).Clone();
}

absl::StatusOr<float> ParallelTrainer::StepRows(const Tensor& x, const Tensor& y) {
  LOOM_ASSIGN_OR_RETURN(inputs_[x_in_], RowsBlock(x, "x"));
  LOOM_ASSIGN_OR_RETURN(inputs_[y_in_], RowsBlock(y, "y"));
  return Run();
}

absl::StatusOr<float> ParallelTrainer::Step(const Tensor& x, const Tensor& y) {
  LOOM_ASSIGN_OR_RETURN(inputs_[x_in_], Block(x, specs_.at("x")));
  LOOM_ASSIGN_OR_RETURN(inputs_[y_in_], Block(y, specs_.at("y")));
  return Run();
}

absl::StatusOr<float> ParallelTrainer::Run() {
  ++step_;
  inputs_[lr_in_].data<float>()[0] = static_cast<float>(compiler::ScheduledLearningRate(spec_.train(), step_));
  inputs_[step_in_].data<float>()[0] = static_cast<float>(step_);
  if (dropout_step_in_ >= 0) inputs_[dropout_step_in_].data<float>()[0] = static_cast<float>(step_);
  LOOM_RETURN_IF_ERROR(exec_->Run(inputs_, &outputs_));
  float loss = outputs_[0].data<float>()[0];
  if (!std::isfinite(loss)) return absl::AbortedError(absl::StrCat("loss is ", loss, " at step ", step_));
  LOOM_RETURN_IF_ERROR(exec_->ApplyUpdates(absl::MakeSpan(inputs_), outputs_));
  return loss;
}

std::map<std::string, Tensor> ParallelTrainer::LocalParameters() const {
  std::map<std::string, Tensor> out;
  const compiler::Graph& g = exec_->program().graph;
  for (const auto& p : params_) out.emplace(p.name, inputs_[g.FindInput(p.name)]);
  return out;
}

}  // namespace loom::parallel
