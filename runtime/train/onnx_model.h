// An ONNX model (model.onnx in the job spec) as the trainer's forward graphs.
//
// The file is imported (compiler/import/onnx) with every [batch, seq_len]
// data input shaped from train.batch_size and model.seq_len (token windows,
// data.kind causal or mlm), or with the model's own shapes and the batch as
// the first dim (data.kind pairs), then rewired to the trainer's contract
// (compiler/import/onnx/training.h): inputs x, y, outputs loss [, logits].
// x feeds model.token_input, else data.inputs.x, else the model's only data
// input; a data input named by data.inputs.y (or model.loss.target) is fed y. Parameters start from the file's initializers;
// buffers are bound like parameters but never trained. Matrices (rank >= 2)
// are weight-decayed, as in the built-in families.
//
// Errors are InvalidArgument and start with "model.onnx: " (the job spec's
// field), so `loom submit`, `loom run` and `loom train` report them as bad
// input.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/import/onnx/importer.h"
#include "compiler/ir/ir.h"
#include "compiler/models/models.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::runtime::train {

struct OnnxTrainingModel {
  std::vector<compiler::models::ParamInfo> params;
  compiler::ir::Graph train_forward;  // outputs: loss
  compiler::ir::Graph eval_forward;   // outputs: loss, logits (when the model has them)
  bool has_logits = false;
  std::map<std::string, Tensor> initial;  // parameters and buffers
  compiler::import::onnx::ImportReport report;
};

// `recover_patterns`: ImportOptions::recover_patterns (the recovery passes).
absl::StatusOr<OnnxTrainingModel> LoadOnnxModel(const v1::JobSpec& spec, bool recover_patterns = true);

// LoadOnnxModel's checks without keeping the result (job submission, loom
// run); with device: cuda the training step's CUDA plan
// (parallel::PlanCudaStep: an op with no CUDA lowering is refused naming the
// op, its ONNX node and the reason); with tp > 1 the job's parallel.tp_plan
// against the graph (parallel/tp_plan.h): a plan that cannot be honoured is
// refused here, before any process starts.
absl::Status CheckOnnxJob(const v1::JobSpec& spec);

}  // namespace loom::runtime::train
