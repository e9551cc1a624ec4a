// The graphs the trainer core (parallel/trainer.h) trains for a job spec: a
// built-in family (parallel::FamilyModel: gpt, llama) or an imported ONNX
// model (model.onnx, onnx_model.h: its initializers are the initial values).
//
//   LOOM_ASSIGN_OR_RETURN(parallel::TrainerModel model, BuildModel(spec));
//   LOOM_ASSIGN_OR_RETURN(auto trainer, parallel::Trainer::Create(spec, std::move(model)));
#pragma once

#include "absl/status/statusor.h"
#include "parallel/trainer.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::train {

// Errors of an ONNX model are InvalidArgument starting with "model.onnx: ".
// `recover_patterns` (ONNX models): run the recovery passes at import
// (compiler/passes/recover.h); false trains the graph as converted (a
// reference for the fused form).
absl::StatusOr<parallel::TrainerModel> BuildModel(const v1::JobSpec& spec, bool recover_patterns = true);

}  // namespace loom::runtime::train
