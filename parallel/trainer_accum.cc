// Gradient accumulation (train.grad_accum_steps = k > 1) in the trainer core:
// the training program is the micro-step (forward + backward on
// batch_size / k rows, outputs the loss and one gradient per parameter), and
// a second program, the update, runs global-norm clipping and AdamW on the
// mean of the k micro-batch gradients. See trainer.h.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/optimizer.h"
#include "parallel/trainer.h"

namespace loom::parallel {

// The update program: inputs are the parameters (kParam), their mean
// gradients (kInput "<param>.grad", fed from the accumulators) and what
// AppendAdamW adds (lr, step, the moments "<param>.m", "<param>.v").
absl::Status Trainer::CompileUpdate(const compiler::AdamWOptions& adam) {
  compiler::JointGraph j;
  j.graph.set_name("update");
  const compiler::ir::Graph& micro = train_graph();
  for (const auto& p : params_) {
    const int k = micro.FindInput(p.name);
    if (k < 0) return absl::InternalError(absl::StrCat("micro-step program lacks parameter '", p.name, "'"));
    j.graph.AddInput(p.name, micro.meta(micro.inputs()[k].value), compiler::ir::InputKind::kParam);
    j.wrt_inputs.push_back(static_cast<int>(j.graph.inputs().size()) - 1);
  }
  for (const auto& p : params_) {
    const compiler::ir::GraphInput& in = j.graph.inputs()[j.graph.FindInput(p.name)];
    j.grads.push_back(j.graph.AddInput(p.name + ".grad", j.graph.meta(in.value)));
  }
  LOOM_RETURN_IF_ERROR(Annotate(compiler::AppendAdamW(j, adam), "building the update program"));
  compiler::CompileOptions co;
  co.differentiate = false;
  co.fuse = options_.fuse;
  co.lowering.in_place_updates = true;
  auto c = compiler::Compile(j.graph, co);
  if (!c.ok()) return Annotate(c.status(), "compiling the update program");
  update_.compilation = std::move(*c);
  if (!update_.compilation.program) return absl::InternalError("update compilation produced no program");
  update_.exec = std::make_unique<compiler::Executor>(std::move(update_.compilation.program));
  return absl::OkStatus();
}

// Binds the update program: parameters shared with the micro-step program,
// zeroed accumulators and moments, the lr and step scalars.
absl::Status Trainer::BindUpdate() {
  const compiler::ir::Graph& micro = train_graph();
  const compiler::ir::Graph& ug = update_.exec->program().graph;
  for (size_t k = 0; k < ug.inputs().size(); ++k) {
    const compiler::ir::GraphInput& in = ug.inputs()[k];
    const kernels::TensorMeta& meta = ug.meta(in.value);
    if (in.kind == compiler::ir::InputKind::kParam) {
      const int mk = micro.FindInput(in.name);
      if (mk < 0) return absl::InternalError(absl::StrCat("update input '", in.name, "' is not a training input"));
      update_.inputs.push_back(train_inputs_[mk]);
      continue;
    }
    Tensor t = Tensor::Zeros(meta.shape, meta.dtype);
    if (in.name == "lr") update_.lr_in = static_cast<int>(k);
    if (in.name == "step") update_.step_in = static_cast<int>(k);
    if (in.kind == compiler::ir::InputKind::kInput && in.name != "lr" && in.name != "step") {
      if (meta.dtype != DType::kF32)
        return absl::InternalError(absl::StrCat("accumulator '", in.name, "' is not f32"));
      update_.accumulators.push_back(t);
    }
    if (in.kind == compiler::ir::InputKind::kState) specs_[in.name] = dtensor::DTensorSpec::Replicated(mesh_);
    update_.inputs.push_back(std::move(t));
  }
  if (update_.lr_in < 0 || update_.step_in < 0 || update_.accumulators.size() != params_.size())
    return absl::InternalError("update program lacks lr, step or an accumulator per parameter");
  return absl::OkStatus();
}

absl::StatusOr<float> Trainer::AccumulateStep(const Batch& batch) {
  // The batch of one update: dim 0 of every data input is k micro-batches.
  for (const DataInput& d : train_data_) {
    auto it = batch.find(d.name);
    if (it == batch.end() || d.global_shape.empty()) continue;  // SetBatch names what is missing
    const Tensor& t = it->second;
    if (t.ndim() == 0 || t.dim(0) != accum_ * d.global_shape[0])
      return absl::InvalidArgumentError(absl::StrCat(
          "batch: input '", d.name, "' is ", DTypeName(t.dtype()), ShapeToString(t.shape()), "; an update takes ",
          accum_ * d.global_shape[0], " rows (train.grad_accum_steps = ", accum_, " micro-batches of ",
          d.global_shape[0], ")"));
  }
  // Micro-batch i: rows [i * n, (i + 1) * n) of every input, copied into
  // tensors kept from one update to the next.
  std::vector<Batch>& micro = update_.micro;
  micro.resize(accum_);
  for (int64_t i = 0; i < accum_; ++i)
    for (const auto& [name, t] : batch) {
      const int64_t n = t.ndim() > 0 ? t.dim(0) / accum_ : 0;
      if (n == 0) {
        micro[i][name] = t;
        continue;
      }
      const Tensor rows = t.Narrow(0, i * n, n);
      Tensor& m = micro[i][name];
      if (!m.defined() || m.shape() != rows.shape() || m.dtype() != rows.dtype()) m = rows.Clone();
      else LOOM_RETURN_IF_ERROR(m.CopyFrom(rows));
    }
  // Names, shapes and dtypes are checked before anything moves.
  LOOM_RETURN_IF_ERROR(SetBatch(micro[0], /*rows=*/false, train_data_, specs_, train_inputs_));
  for (Tensor& a : update_.accumulators) a.Fill(0);
  ++step_;
  double loss_sum = 0;
  for (int64_t i = 0; i < accum_; ++i) {
    LOOM_RETURN_IF_ERROR(SetBatch(micro[i], /*rows=*/false, train_data_, specs_, train_inputs_));
    // Dropout masks (and an imported model's offset) advance per micro-step.
    const float micro_step = static_cast<float>((step_ - 1) * accum_ + i + 1);
    if (step_in_ >= 0) train_inputs_[step_in_].data<float>()[0] = micro_step;
    if (dropout_step_in_ >= 0) train_inputs_[dropout_step_in_].data<float>()[0] = micro_step;
    LOOM_RETURN_IF_ERROR(train_exec_->Run(train_inputs_, &outputs_));
    const float loss = outputs_[0].data<float>()[0];
    if (!std::isfinite(loss))
      return absl::AbortedError(absl::StrCat("loss is ", loss, " at step ", step_, " (micro-batch ", i + 1, " of ",
                                             accum_, "); stopping"));
    loss_sum += loss;
    for (size_t p = 0; p < update_.accumulators.size(); ++p) {
      float* acc = update_.accumulators[p].data<float>();
      const Tensor g = outputs_[1 + p].Contiguous();
      const float* gp = g.data<float>();
      for (int64_t e = 0, n = g.numel(); e < n; ++e) acc[e] += gp[e];
    }
  }
  const float inv = 1.0f / static_cast<float>(accum_);
  for (Tensor& a : update_.accumulators) {
    float* acc = a.data<float>();
    for (int64_t e = 0, n = a.numel(); e < n; ++e) acc[e] *= inv;
  }
  update_.inputs[update_.lr_in].data<float>()[0] = static_cast<float>(LearningRate(step_));
  update_.inputs[update_.step_in].data<float>()[0] = static_cast<float>(step_);
  LOOM_RETURN_IF_ERROR(update_.exec->Run(update_.inputs, &update_.outputs));
  LOOM_RETURN_IF_ERROR(update_.exec->ApplyUpdates(absl::MakeSpan(update_.inputs), update_.outputs));
  return static_cast<float>(loss_sum / static_cast<double>(accum_));
}

}  // namespace loom::parallel
