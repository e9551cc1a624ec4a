#include "runtime/train/onnx_model.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/training.h"

namespace loom::train {

namespace onnx = compiler::import::onnx;

absl::StatusOr<OnnxTrainingModel> LoadOnnxModel(const v1::JobSpec& spec, bool recover_patterns) {
  const auto& m = spec.model();
  auto bad = [](const absl::Status& s) { return absl::InvalidArgumentError(absl::StrCat("model.onnx: ", s.message())); };
  onnx::ImportOptions io;
  io.default_input_shape = Shape{spec.train().batch_size(), m.seq_len()};
  io.recover_patterns = recover_patterns;
  auto imported = onnx::ImportModel(m.onnx(), io);
  if (!imported.ok()) return bad(imported.status());
  onnx::TrainingGraphOptions to;
  to.token_input = m.token_input();
  to.loss_kind = m.loss().kind();
  to.target = m.loss().target().empty() ? onnx::kShiftedInputs : m.loss().target();
  to.ignore_index = m.loss().has_ignore_index() ? m.loss().ignore_index() : -100;
  to.vocab = m.vocab();
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
    models::ParamInfo p;
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
  return LoadOnnxModel(spec).status();
}

}  // namespace loom::train
