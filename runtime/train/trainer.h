// Single-process training of a model family, or of an imported ONNX model
// (model.onnx, runtime/train/onnx_model.h), from a JobSpec.
//
// A Trainer compiles two programs once:
//   - the training step: forward + backward + AdamW update (compiler/compile.h),
//     run with the parameters, optimizer state, a batch, the learning rate and
//     the step number as inputs; updated parameters and state are copied back;
//   - the evaluation step: forward only, for validation loss.
// Parameters and state are owned by the Trainer; the programs own their arenas.
// After the first step a training step allocates nothing.
//
//   LOOM_ASSIGN_OR_RETURN(auto t, Trainer::Create(spec));
//   for (...) { LOOM_ASSIGN_OR_RETURN(float loss, t->Step(x, y)); }
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/executor.h"
#include "compiler/models/models.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::train {

struct TrainerOptions {
  // Initial parameters by name; missing ones come from the ONNX file's
  // initializers or are initialised from train.seed (built-in families).
  std::map<std::string, Tensor> init;
  bool keep_gradients = false;  // step outputs also hold d loss / d param
  bool fuse = true;
  // ONNX models: run the recovery passes at import (compiler/passes/recover.h);
  // false trains the graph as converted (a reference for the fused form).
  bool recover_patterns = true;
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const v1::JobSpec& spec,
                                                         TrainerOptions options = {});

  // One optimizer step on (x, y), the batch's model input and targets (i32
  // [batch, seq_len] for token windows; what the model's inputs take
  // otherwise: a batch of another dtype or shape is InvalidArgument); returns
  // the loss before the update.
  absl::StatusOr<float> Step(const Tensor& x, const Tensor& y);
  // Loss on (x, y) without updating anything.
  absl::StatusOr<float> Evaluate(const Tensor& x, const Tensor& y);
  // Logits of the last training step's batch ([batch * seq_len, vocab]) are not
  // kept; Forward runs the evaluation program and returns (loss, logits).
  absl::StatusOr<std::pair<float, Tensor>> Forward(const Tensor& x, const Tensor& y);

  // device: cuda: the last Step's loss in place on the GPU (f32 [], valid
  // until the next Step), for averaging it across ranks through the CUDA
  // backend of a process group. FailedPrecondition on the CPU path.
  absl::StatusOr<Tensor> DeviceLoss();
  // device: cuda: reads that loss back (after a collective changed it).
  absl::StatusOr<float> ReadLoss();

  // Gradients of the last Step (needs keep_gradients), by parameter name.
  std::map<std::string, Tensor> LastGradients() const;
  std::map<std::string, Tensor> Parameters() const;
  const std::vector<models::ParamInfo>& param_info() const { return params_; }
  int64_t step() const { return step_; }
  double LearningRate(int64_t step) const;  // 1-based step
  const compiler::Compilation& compilation() const { return train_; }
  int64_t num_parameters() const { return models::NumParameters(params_); }
  // Whether Forward returns logits (an ONNX model that outputs only its loss
  // has none).
  bool has_logits() const { return has_logits_; }

 private:
  Trainer() = default;

  v1::JobSpec spec_;
  TrainerOptions options_;
  std::vector<models::ParamInfo> params_;
  // The training graph's inputs are in this graph's order (CPU or CUDA).
  const compiler::Graph& train_graph() const;
  // x and y have the dtypes and shapes of the training graph's inputs.
  absl::Status CheckBatch(const Tensor& x, const Tensor& y) const;
  // device: cuda: copies the parameters back into the host tensors (which the
  // evaluation program shares) when a step changed them.
  absl::Status SyncFromDevice() const;

  compiler::Compilation train_, eval_;
  std::unique_ptr<compiler::Executor> train_exec_, eval_exec_;
  std::unique_ptr<compiler::cuda::CudaExecutor> cuda_;  // device: cuda
  mutable bool host_stale_ = false;
  mutable std::vector<Tensor> train_inputs_;
  std::vector<Tensor> eval_inputs_;
  std::vector<Tensor> outputs_;
  int x_in_ = -1, y_in_ = -1, lr_in_ = -1, step_in_ = -1, ex_in_ = -1, ey_in_ = -1;
  int dropout_step_in_ = -1;  // an imported model's dropout offset (training.h)
  int64_t step_ = 0;
  bool has_logits_ = true;
};

}  // namespace loom::train
