// Gradient accumulation (train.grad_accum_steps = k > 1) in the trainer core:
// the training program is the micro-step (forward + backward on one micro-batch
// of this rank's rows; outputs the loss and one gradient per parameter, which
// on several ranks stay unreduced over dp, Partial), and a second program, the
// update, reduces the mean of the k micro-batch gradients once (where AdamW or
// ZeRO's sharded state needs it), clips by the global norm and applies AdamW.
// See trainer.h.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/optimizer.h"
#include "parallel/trainer.h"

namespace loom::parallel {

namespace {

// The spec of a localized program's input `name`, or of its output `index`
// ("parallel" stage); replicated when the compilation has none (one rank).
absl::StatusOr<dtensor::DTensorSpec> LocalSpec(const compiler::Compilation& c, const std::string& name, int index,
                                               const dtensor::MeshShape& mesh) {
  auto it = c.stages.find("parallel");
  if (it == c.stages.end()) return dtensor::DTensorSpec::Replicated(mesh);
  const compiler::ir::Graph& g = it->second;
  const int k = name.empty() ? -1 : g.FindInput(name);
  if (name.empty() ? index >= static_cast<int>(g.outputs().size()) : k < 0)
    return absl::InternalError(absl::StrCat("no input '", name, "' or output ", index, " in the parallel graph"));
  return dtensor::ParseSpec(g.value(name.empty() ? g.outputs()[index].value : g.inputs()[k].value).placement, mesh);
}

}  // namespace

// The update program: inputs are the parameters (kParam), their mean
// gradients (kInput "<param>.grad", fed from the accumulators) and what
// AppendAdamW adds (lr, step, the moments "<param>.m", "<param>.v"). On
// several ranks it is localized with the micro-step's gradient placements.
absl::Status Trainer::CompileUpdate(const compiler::AdamWOptions& adam) {
  compiler::JointGraph j;
  j.graph.set_name("update");
  const compiler::ir::Graph& global = single() ? train_graph() : train_.stages.at("joint");
  for (const auto& p : params_) {
    const int k = global.FindInput(p.name);
    if (k < 0) return absl::InternalError(absl::StrCat("micro-step program lacks parameter '", p.name, "'"));
    j.graph.AddInput(p.name, global.meta(global.inputs()[k].value), compiler::ir::InputKind::kParam);
    j.wrt_inputs.push_back(static_cast<int>(j.graph.inputs().size()) - 1);
  }
  for (const auto& p : params_) {
    const compiler::ir::GraphInput& in = j.graph.inputs()[j.graph.FindInput(p.name)];
    j.grads.push_back(j.graph.AddInput(p.name + ".grad", j.graph.meta(in.value)));
    j.graph.AddOutput(j.grads.back());  // AppendAdamW keeps it with keep_gradients
  }
  LOOM_RETURN_IF_ERROR(Annotate(compiler::AppendAdamW(j, adam), "building the update program"));
  compiler::CompileOptions co;
  co.differentiate = false;
  co.fuse = options_.fuse;
  co.lowering.in_place_updates = true;
  absl::StatusOr<compiler::Compilation> c;
  if (single()) {
    c = compiler::Compile(j.graph, co);
  } else {
    // Each gradient input takes the placement of the micro-step's gradient
    // output (outputs: the loss, then one gradient per parameter).
    std::map<std::string, dtensor::DTensorSpec> grads;
    std::vector<TpAssignment> tp;
    for (size_t i = 0; i < params_.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(grads[params_[i].name + ".grad"], LocalSpec(train_, "", static_cast<int>(1 + i), mesh_));
      TpAssignment a;
      a.param = params_[i].name;
      LOOM_ASSIGN_OR_RETURN(dtensor::DTensorSpec ps, LocalSpec(train_, params_[i].name, -1, mesh_));
      a.placement = ps.placements[1];
      tp.push_back(std::move(a));
    }
    co.lowering.communicators = options_.comms;
    c = CompileParallelUpdate(j.graph, co, tp, layout_, grads);
  }
  if (!c.ok()) return Annotate(c.status(), "compiling the update program");
  update_.compilation = std::move(*c);
  if (!update_.compilation.program) return absl::InternalError("update compilation produced no program");
  update_.exec = std::make_unique<compiler::Executor>(std::move(update_.compilation.program));
  return absl::OkStatus();
}

// Binds the update program: parameters shared with the micro-step program,
// zeroed accumulators (each the local shape of its micro-step gradient) and
// moments, the lr and step scalars.
absl::Status Trainer::BindUpdate() {
  const compiler::ir::Graph& micro = train_graph();
  const compiler::ir::Graph& ug = update_.exec->program().graph;
  for (size_t k = 0; k < ug.inputs().size(); ++k) {
    const compiler::ir::GraphInput& in = ug.inputs()[k];
    const kernels::TensorMeta& meta = ug.meta(in.value);
    LOOM_ASSIGN_OR_RETURN(dtensor::DTensorSpec spec, LocalSpec(update_.compilation, in.name, -1, mesh_));
    if (in.kind == compiler::ir::InputKind::kParam) {
      const int mk = micro.FindInput(in.name);
      if (mk < 0) return absl::InternalError(absl::StrCat("update input '", in.name, "' is not a training input"));
      if (!(spec == specs_.at(in.name)))
        return absl::InternalError(absl::StrCat("update input '", in.name, "' is ", spec.ToString(),
                                                " but the micro-step holds it as ", specs_.at(in.name).ToString()));
      update_.inputs.push_back(train_inputs_[mk]);
      continue;
    }
    Tensor t = Tensor::Zeros(meta.shape, meta.dtype);
    if (in.name == "lr") update_.lr_in = static_cast<int>(k);
    if (in.name == "step") update_.step_in = static_cast<int>(k);
    if (in.kind == compiler::ir::InputKind::kInput && in.name != "lr" && in.name != "step") {
      if (meta.dtype != DType::kF32)
        return absl::InternalError(absl::StrCat("accumulator '", in.name, "' is not f32"));
      const size_t p = update_.accumulators.size();
      const kernels::TensorMeta& g = micro.meta(micro.outputs().at(1 + p).value);
      if (g.shape != meta.shape)
        return absl::InternalError(absl::StrCat("accumulator '", in.name, "' is ", ShapeToString(meta.shape),
                                                " but the micro-step's gradient is ", ShapeToString(g.shape)));
      update_.accumulators.push_back(t);
    }
    if (in.kind == compiler::ir::InputKind::kState) specs_[in.name] = spec;
    update_.inputs.push_back(std::move(t));
  }
  if (update_.lr_in < 0 || update_.step_in < 0 || update_.accumulators.size() != params_.size())
    return absl::InternalError("update program lacks lr, step or an accumulator per parameter");
  return absl::OkStatus();
}

absl::StatusOr<float> Trainer::AccumulateStep(const Batch& batch, bool rows) {
  // The batch of one update: the global batch (its dim 0 is k micro-batches),
  // or, with `rows`, this rank's rows of it (BatchRows). Either way this rank
  // runs micro-batch i on rows [i * n, (i + 1) * n) of its own rows, n =
  // BatchRows().second / k: on one rank, consecutive rows of the batch.
  const int64_t n = rows_.second / accum_;
  for (const DataInput& d : train_data_) {
    auto it = batch.find(d.name);
    if (it == batch.end() || d.global_shape.empty()) continue;  // SetBatch names what is missing
    const Tensor& t = it->second;
    const int64_t want = rows ? rows_.second : accum_ * d.global_shape[0];
    if (t.ndim() == 0 || t.dim(0) != want)
      return absl::InvalidArgumentError(absl::StrCat(
          "batch: input '", d.name, "' is ", DTypeName(t.dtype()), ShapeToString(t.shape()), "; an update takes ",
          want, rows ? " rows of this rank (" : " rows (", "train.grad_accum_steps = ", accum_,
          " micro-batches of ", d.global_shape[0], ")"));
  }
  const int64_t first = rows ? 0 : rows_.first;
  // Micro-batch i's rows of every input, copied into tensors kept from one
  // update to the next.
  std::vector<Batch>& micro = update_.micro;
  micro.resize(accum_);
  for (int64_t i = 0; i < accum_; ++i)
    for (const auto& [name, t] : batch) {
      if (t.ndim() == 0) {
        micro[i][name] = t;
        continue;
      }
      const Tensor part = t.Narrow(0, first + i * n, n);
      Tensor& m = micro[i][name];
      if (!m.defined() || m.shape() != part.shape() || m.dtype() != part.dtype()) m = part.Clone();
      else LOOM_RETURN_IF_ERROR(m.CopyFrom(part));
    }
  // Names, shapes and dtypes are checked before anything moves.
  LOOM_RETURN_IF_ERROR(SetBatch(micro[0], /*rows=*/true, train_data_, specs_, train_inputs_));
  for (Tensor& a : update_.accumulators) a.Fill(0);
  ++step_;
  double loss_sum = 0;
  for (int64_t i = 0; i < accum_; ++i) {
    LOOM_RETURN_IF_ERROR(SetBatch(micro[i], /*rows=*/true, train_data_, specs_, train_inputs_));
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
      for (int64_t e = 0, ne = g.numel(); e < ne; ++e) acc[e] += gp[e];
    }
  }
  const float inv = 1.0f / static_cast<float>(accum_);
  for (Tensor& a : update_.accumulators) {
    float* acc = a.data<float>();
    for (int64_t e = 0, ne = a.numel(); e < ne; ++e) acc[e] *= inv;
  }
  update_.inputs[update_.lr_in].data<float>()[0] = static_cast<float>(LearningRate(step_));
  update_.inputs[update_.step_in].data<float>()[0] = static_cast<float>(step_);
  LOOM_RETURN_IF_ERROR(update_.exec->Run(update_.inputs, &update_.outputs));
  LOOM_RETURN_IF_ERROR(update_.exec->ApplyUpdates(absl::MakeSpan(update_.inputs), update_.outputs));
  return static_cast<float>(loss_sum / static_cast<double>(accum_));
}

}  // namespace loom::parallel
