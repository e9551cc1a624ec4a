// One rank of a parallel training run: compiles the localized training step
// (styles.h: CompileParallel) and runs it with the communicators of its mesh
// groups ("dp", "tp"; a mesh dim of size 1 needs none).
//
// Parameters are initialised exactly like the single-process Trainer (from
// train.seed, or options.init, or an imported model's initializers), but each
// rank generates only its own block (the global tensors never exist on a rank
// unless given in options.init or by the imported model);
// Step takes the GLOBAL batch and uses this rank's dp block of it, so N ranks
// reproduce the single-process run step for step; StepRows takes only this
// rank's rows (BatchRows) for loaders that read no more than those.
//
//   LOOM_ASSIGN_OR_RETURN(auto t, ParallelTrainer::Create(spec, layout, rank, {{"dp", dp.get()}}));
//   LOOM_ASSIGN_OR_RETURN(float loss, t->Step(x, y));   // x, y: global [batch, seq]
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/comm/communicator.h"
#include "compiler/compile.h"
#include "compiler/executor.h"
#include "compiler/models/models.h"
#include "parallel/styles.h"

namespace loom::parallel {

// An imported model (model.family onnx): its training forward graph (inputs
// x, y and, with dropout, dropout_step; output the loss:
// compiler/import/onnx/training.h), its parameters and the global initial
// values of its parameters and buffers (runtime/train/onnx_model.h loads
// all three from the file). Each rank keeps only its block of each value.
struct ImportedForward {
  compiler::Graph forward;
  std::vector<models::ParamInfo> params;
  std::map<std::string, Tensor> initial;
};

struct ParallelTrainerOptions {
  std::map<std::string, Tensor> init;  // global initial parameters by name
  bool fuse = true;
  int64_t bucket_bytes = 0;  // > 0: bucket the dp gradient all-reduces (styles.h)
  // Set for spec.model.family onnx (not owned; read during Create only).
  const ImportedForward* imported = nullptr;
};

class ParallelTrainer {
 public:
  static absl::StatusOr<std::unique_ptr<ParallelTrainer>> Create(const v1::JobSpec& spec, const Layout& layout,
                                                                 int rank, compiler::CommunicatorMap comms,
                                                                 ParallelTrainerOptions options = {});
  absl::StatusOr<float> Step(const Tensor& x, const Tensor& y);
  // This rank's rows of the global batch, [first, first + count) along dim 0
  // of x and y (its dp block); a data loader reads only those rows.
  std::pair<int64_t, int64_t> BatchRows() const;
  // The same step as Step, given only this rank's rows of the global x and y
  // ([count, seq_len] as BatchRows says).
  absl::StatusOr<float> StepRows(const Tensor& x_rows, const Tensor& y_rows);

  // This rank's block of each parameter, and the spec it follows.
  std::map<std::string, Tensor> LocalParameters() const;
  const std::map<std::string, dtensor::DTensorSpec>& specs() const { return specs_; }
  // This rank's block of a global tensor under `spec` (a contiguous copy).
  absl::StatusOr<Tensor> Block(const Tensor& global, const dtensor::DTensorSpec& spec) const;
  // This rank's block of parameter params_[index] initialised from `seed`
  // (the same values models::InitParameters gives the global tensor).
  absl::StatusOr<Tensor> InitBlock(size_t index, uint64_t seed, const dtensor::DTensorSpec& spec) const;
  const compiler::Compilation& compilation() const { return c_; }  // stages; its program moved to the executor
  const compiler::Program& program() const { return exec_->program(); }
  // For checkpoints: the program's inputs (this rank's parameter and AdamW
  // state blocks are updated in place there) and the optimizer step count.
  std::vector<Tensor>& mutable_program_inputs() { return inputs_; }
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // The program's inputs in order (params, AdamW state, x, y, lr, step), as held now.
  const std::vector<Tensor>& program_inputs() const { return inputs_; }
  const std::vector<models::ParamInfo>& param_info() const { return params_; }

 private:
  ParallelTrainer() = default;
  absl::StatusOr<Tensor> RowsBlock(const Tensor& rows, const std::string& name) const;  // rows -> program input
  absl::StatusOr<float> Run();  // the step on the inputs set
  v1::JobSpec spec_;
  Layout layout_;
  dtensor::MeshShape mesh_;
  std::vector<int64_t> coords_;
  std::vector<models::ParamInfo> params_;
  compiler::Compilation c_;
  std::unique_ptr<compiler::Executor> exec_;
  std::map<std::string, dtensor::DTensorSpec> specs_;  // every graph input
  std::vector<Tensor> inputs_, outputs_;
  int x_in_ = -1, y_in_ = -1, lr_in_ = -1, step_in_ = -1;
  int dropout_step_in_ = -1;  // an imported model's dropout offset (compiler/import/onnx/training.h)
  int64_t step_ = 0;
};

}  // namespace loom::parallel
