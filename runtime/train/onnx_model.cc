#include "runtime/train/onnx_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/training.h"
#include "parallel/graph_planner.h"
#include "parallel/styles.h"
#include "parallel/trainer.h"

namespace loom::runtime::train {

namespace onnx = compiler::import::onnx;

namespace {

bool HasDataInput(const onnx::ImportedModel& m, const std::string& name) {
  return std::find(m.data_inputs.begin(), m.data_inputs.end(), name) != m.data_inputs.end();
}

// Which data inputs x and y feed: model.token_input, else data.inputs.x; the
// loss target, else data.inputs.y when the model has an input of that name.
absl::StatusOr<onnx::TrainingGraphOptions> FeedOptions(const v1::JobSpec& spec, const onnx::ImportedModel& imported) {
  const auto& m = spec.model();
  const auto& inputs = spec.data().inputs();
  onnx::TrainingGraphOptions to;
  to.token_input = m.token_input();
  if (to.token_input.empty() && !inputs.x().empty() && inputs.x() != "x") {
    if (!HasDataInput(imported, inputs.x()))
      return absl::InvalidArgumentError(absl::StrCat("data.inputs.x: '", inputs.x(), "' is not a data input of the model"));
    to.token_input = inputs.x();
  }
  to.loss_kind = m.loss().kind();
  to.target = m.loss().target().empty() ? onnx::kShiftedInputs : m.loss().target();
  if (to.target == onnx::kShiftedInputs && HasDataInput(imported, inputs.y())) to.target = inputs.y();
  to.ignore_index = m.loss().has_ignore_index() ? m.loss().ignore_index() : -100;
  to.vocab = m.vocab();
  return to;
}

// device: cuda: the training step plans onto the CUDA executor's launches
// (parallel::PlanCudaStep); an op with no CUDA lowering is bad input naming
// the fields, the op, the ONNX node it comes from and the reason.
absl::Status CheckCudaLowering(const v1::JobSpec& spec, const OnnxTrainingModel& m) {
  parallel::TrainerModel model;
  model.params = m.params;
  model.train_forward = m.train_forward;
  auto plan = parallel::PlanCudaStep(spec, model);
  if (plan.ok()) return absl::OkStatus();
  if (!absl::IsUnimplemented(plan.status())) return plan.status();
  return absl::InvalidArgumentError(absl::StrCat("device: cuda: model.onnx ", spec.model().onnx(),
                                                 " does not lower to CUDA: ", plan.status().message()));
}

}  // namespace

absl::StatusOr<OnnxTrainingModel> LoadOnnxModel(const v1::JobSpec& spec, bool recover_patterns) {
  const auto& m = spec.model();
  auto bad = [](const absl::Status& s) { return absl::InvalidArgumentError(absl::StrCat("model.onnx: ", s.message())); };
  onnx::ImportOptions io;
  // Token windows shape every [batch, seq_len] input; records (data.kind
  // pairs) keep the model's own shapes with the batch as the first dim.
  if (spec.data().kind() != "pairs") io.default_input_shape = Shape{spec.train().batch_size(), m.seq_len()};
  io.batch = spec.train().batch_size();
  io.recover_patterns = recover_patterns;
  auto imported = onnx::ImportModel(m.onnx(), io);
  if (!imported.ok()) return bad(imported.status());
  auto fed = FeedOptions(spec, *imported);
  if (!fed.ok()) return fed.status();
  onnx::TrainingGraphOptions to = *fed;
  OnnxTrainingModel out;
  auto train = onnx::BuildTrainingGraph(*imported, to);
  if (!train.ok()) return bad(train.status());
  to.return_logits = true;
  auto eval = onnx::BuildTrainingGraph(*imported, to);
  if (!eval.ok()) return bad(eval.status());
  out.train_forward = std::move(train->graph);
  out.eval_forward = std::move(eval->graph);
  out.has_logits = eval->has_logits;
  for (const std::string& name : imported->params) {
    if (imported->initial.at(name).dtype() != DType::kF32)
      return bad(absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is ",
                                                          DTypeName(imported->initial.at(name).dtype()),
                                                          "; Loom trains f32 parameters")));
    compiler::models::ParamInfo p;
    p.name = name;
    p.shape = imported->initial.at(name).shape();
    p.weight_decay = p.shape.size() >= 2;
    out.params.push_back(std::move(p));
  }
  out.initial = std::move(imported->initial);
  out.report = imported->report;
  return out;
}

absl::Status CheckOnnxJob(const v1::JobSpec& spec) {
  if (spec.model().family() != "onnx") return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(OnnxTrainingModel m, LoadOnnxModel(spec));
  if (spec.device() == "cuda") LOOM_RETURN_IF_ERROR(CheckCudaLowering(spec, m));
  const v1::ParallelSpec& p = spec.parallel();
  if (p.tp_auto() || p.tp() < 2) return absl::OkStatus();
  // The tp plan against the graph, through the same resolution and
  // propagation the ranks will run (no lowering).
  const parallel::Layout layout = parallel::LayoutFromSpec(p);
  return parallel::CompileParallel(m.train_forward, parallel::PlanningCompileOptions(m.train_forward, spec.train()),
                                   spec.model(), spec.train().batch_size(), layout)
      .status();
}

}  // namespace loom::runtime::train
