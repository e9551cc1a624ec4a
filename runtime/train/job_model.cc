#include "runtime/train/job_model.h"

#include "base/status.h"
#include "runtime/train/onnx_model.h"

namespace loom::runtime::train {

absl::StatusOr<parallel::TrainerModel> BuildModel(const v1::JobSpec& spec, bool recover_patterns) {
  if (spec.model().family() != "onnx") return parallel::FamilyModel(spec);
  LOOM_ASSIGN_OR_RETURN(OnnxTrainingModel m, LoadOnnxModel(spec, recover_patterns));
  parallel::TrainerModel out;
  out.params = std::move(m.params);
  out.train_forward = std::move(m.train_forward);
  out.eval_forward = std::move(m.eval_forward);
  out.has_logits = m.has_logits;
  out.initial = std::move(m.initial);
  return out;
}

}  // namespace loom::runtime::train
