// The trainer core: one rank of a training run under a layout, shared by
// `loom train` (one process) and `loom worker` (one rank of a parallel job;
// both drivers run runtime/train/train_loop.h).
//
// A Trainer compiles two programs once, for its layout:
//   - the training step: forward + backward + AdamW update, run with the
//     parameters, optimizer state, a batch, the learning rate and the step
//     number as inputs; AdamW updates parameters and state in place;
//   - the evaluation step: forward only. On one rank it outputs the loss and
//     the logits (when the model has them). On several ranks it outputs the
//     loss only, and Forward compiles, on its first call, a third program
//     whose logits are gathered whole on every rank (their arena is only
//     paid for then). SampleLogits compiles, on its first call, the same
//     forward at one row per dp block, so that sampling a token costs one
//     sequence's forward rather than the whole batch's.
// A one-rank layout (dp = tp = 1, the default) is the single-process case:
// compiler::Compile on the model's graphs, no communicators. A larger layout
// compiles both steps through sharding propagation (styles.h: CompileParallel)
// and binds one communicator per mesh dim of size > 1 ("dp", "tp"). With
// device: cuda the training step (its "fused" graph, collectives included)
// runs on the CUDA executor, which calls the same communicators on device
// buffers; evaluation and Forward run the CPU program on a host copy of this
// rank's parameter blocks, read back after a step changed them. Every call
// that runs a program (Step, Evaluate, Forward and their Rows forms) is then
// collective: every rank of the mesh calls it in the same order with the same
// global batch (or its own rows of it).
//
// A batch comes whole (Step, Evaluate, Forward: the global tensors; each rank
// takes its block) or as this rank's rows only (StepRows, EvaluateRows:
// rows [first, first + count) of dim 0 of every data input, BatchRows), so a
// data loader reads no more than its dp block; both give the same step.
//
// Parameters and optimizer state are owned by the Trainer, as this rank's
// block of each (the whole tensor on one rank). Parameters start from, by
// name: options.init_blocks (this rank's block read from elsewhere, e.g.
// init_from), else options.init (global tensors), else the model's own
// initial values (an ONNX file's initializers), else train.seed: element e of
// parameter i is init_std * Philox(seed, i).Normal(e) (compiler::models::InitParameters),
// evaluated only at this rank's block, so a rank never holds a global tensor.
// The AdamW moments start from zero.
// After the first step a training step allocates nothing.
//
// Gradient accumulation (train.grad_accum_steps = k > 1; device: cpu): Step
// still takes the batch of one update (train.batch_size rows; StepRows this
// rank's BatchRows of it) and each rank splits its own rows into k
// micro-batches of consecutive rows (on one rank: consecutive rows of the
// batch). The training program is then the micro-step, forward + backward on
// one micro-batch, whose gradients the trainer adds into one f32 accumulator
// per parameter; on several ranks they stay unreduced over dp (Partial, the
// placement sharding propagation gives them), so a micro-step sends no
// gradient. An update program then reduces the mean of the k gradients once
// (all_reduce, or reduce_scatter into ZeRO's sharded state), clips and applies
// AdamW. LastGradients returns that mean (on several ranks, whole: the update
// program then also outputs the reduced gradients). Step returns the mean of
// the micro-batch losses. A model's dropout step input counts micro-steps,
// (step - 1) * k + i.
//
//   LOOM_ASSIGN_OR_RETURN(auto t, Trainer::Create(spec));          // one process
//   LOOM_ASSIGN_OR_RETURN(float loss, t->Step({{"x", x}, {"y", y}}));
//
//   TrainerOptions o;                                               // rank 3 of dp=2 x tp=2
//   o.layout = LayoutFromSpec(spec.parallel()); o.rank = 3; o.comms = {{"dp", dp}, {"tp", tp}};
//   LOOM_ASSIGN_OR_RETURN(auto t, Trainer::Create(spec, FamilyModel(spec).value(), o));
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/comm/communicator.h"
#include "compiler/compile.h"
#include "compiler/cuda/cuda_executor.h"
#include "compiler/executor.h"
#include "compiler/models/models.h"
#include "compiler/optimizer.h"
#include "dtensor/spec.h"
#include "parallel/styles.h"
#include "proto/loom/v1/job.pb.h"

namespace loom::parallel {

// What a Trainer trains: the forward graphs of a model and its parameters.
// Training graph inputs: parameters (kParam), buffers (kConst), the batch
// (kInput, e.g. x and y) and, for an imported model with dropout, the input
// compiler::import::onnx::kDropoutStep; its one output is the loss. The
// evaluation graph has the same inputs (no dropout step) and outputs the loss
// and, when has_logits, the logits.
struct TrainerModel {
  std::vector<compiler::models::ParamInfo> params;  // in graph-input order
  compiler::ir::Graph train_forward;
  compiler::ir::Graph eval_forward;
  // Optional: builds eval_forward at a smaller batch of `rows` rows, for
  // sampling one sequence at a time (Trainer::SampleLogits asks for one row
  // per dp block); unset: sampling runs eval_forward at the training batch.
  std::function<absl::StatusOr<compiler::ir::Graph>(int64_t rows)> sample_forward;
  bool has_logits = true;
  // Global initial values by input name (parameters and buffers); parameters
  // not in it are drawn from train.seed.
  std::map<std::string, Tensor> initial;
};

// A built-in family's graphs (compiler/models: gpt, llama) for spec.model and
// train.batch_size; the training graph with model.dropout (its masks keyed by
// train.seed and the step input AdamW shares), the evaluation graph without.
// With train.activation_checkpointing the trainer compiles the training step
// with block recomputation (compiler/passes/checkpointing.h). An imported
// model's graphs come from runtime/train/job_model.h.
absl::StatusOr<TrainerModel> FamilyModel(const v1::JobSpec& spec);

// device: cuda: the training step that Trainer::Create hands to the CUDA
// executor (the compiled "fused" graph: under a parallel layout, spec.parallel,
// the localized program with its collective ops, the same on every rank) and
// its plan (compiler/cuda/plan.h), built without a device or communicators
// (every group's rank-dependent ops planned as rank 0's), so a job is checked
// before launch. Unimplemented names the op with no CUDA lowering, its node
// and, for an imported model, the ONNX node it comes from (ir::Node::origin).
struct CudaStepPlan {
  compiler::ir::Graph step;
  compiler::cuda::CudaPlan plan;
};
absl::StatusOr<compiler::ir::Graph> CompileCudaStep(const v1::JobSpec& spec, const TrainerModel& model);
// The CUDA executor's options for the job: train.precision, train.deterministic,
// train.memory, train.offload_optimizer_state and train.residual_precision.
compiler::cuda::CudaOptions CudaStepOptions(const v1::JobSpec& spec);
absl::StatusOr<CudaStepPlan> PlanCudaStep(const v1::JobSpec& spec, const TrainerModel& model);

// One step's data: tensors by graph input name ("x", "y" [batch, seq_len]
// i32 for the language-model families; an imported model's x and y take the
// shapes and dtypes of the model's inputs). Every data input of the program
// must be given, and nothing else; a wrong name, shape or dtype is
// InvalidArgument naming the input.
using Batch = std::map<std::string, Tensor>;

// The rectangle [offsets, offsets + lengths) of parameter `param`'s global
// tensor, as f32 of shape `lengths`.
using InitBlockFn = std::function<absl::StatusOr<Tensor>(
    const std::string& param, const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths)>;

struct TrainerOptions {
  Layout layout;                    // default dp = tp = 1: one process
  int rank = 0;                     // in the mesh (dp, tp), row-major
  compiler::comm::CommunicatorMap comms;  // by mesh dim name, for each dim of size > 1
  // Set: every parameter's block comes from it (called once per parameter
  // with a non-empty block, during Create).
  InitBlockFn init_blocks;
  // Global initial parameters by name; they take precedence over the model's.
  std::map<std::string, Tensor> init;
  // The step also outputs d loss / d param: one rank, or several with
  // gradient accumulation (the reduced mean gradients, whole).
  bool keep_gradients = false;
  // d loss / d loss that starts the backward (compiler AutodiffOptions::seed):
  // the gradients, their norm and AdamW's m and v are all this multiple of
  // the loss's own; the loss is not. Paired with train.eps and
  // train.grad_clip scaled alike it is the same training with other f32
  // roundings, which tests/parity uses to sample Loom's rounding noise.
  double loss_seed = 1.0;
  bool fuse = true;
  int64_t bucket_bytes = 0;  // > 0: bucket the dp gradient all-reduces (styles.h); 0: parallel.bucket_mb
  // device: cuda: the CUDA device ordinal this rank's executor runs on
  // (CudaOptions::device; a worker's pick, runtime/launch/rank_gpu.h).
  int cuda_device = 0;
  // device: cuda: builds the executor of the training step, given the fused
  // graph and the options (the spec's precision and determinism, cuda_device
  // and, on several ranks, `comms` as CudaOptions::communicators); unset:
  // compiler::cuda::CudaExecutor::Create. A seam for tests, which put a
  // host-memory executor behind the same interface (parallel/testing/).
  std::function<absl::StatusOr<std::unique_ptr<compiler::cuda::CudaExecutor>>(const compiler::ir::Graph&,
                                                                              const compiler::cuda::CudaOptions&)>
      make_cuda_executor;
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const v1::JobSpec& spec, TrainerModel model,
                                                         TrainerOptions options = {});
  // A built-in family (FamilyModel).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const v1::JobSpec& spec, TrainerOptions options = {});

  // One optimizer step on the global batch (this rank's block of it); returns
  // the loss before the update. Aborted when the loss is not finite.
  absl::StatusOr<float> Step(const Batch& batch);
  absl::StatusOr<float> Step(const Tensor& x, const Tensor& y) { return Step(Batch{{"x", x}, {"y", y}}); }
  // Loss on the batch without updating anything.
  absl::StatusOr<float> Evaluate(const Batch& batch);
  absl::StatusOr<float> Evaluate(const Tensor& x, const Tensor& y) { return Evaluate(Batch{{"x", x}, {"y", y}}); }

  // This rank's rows of the global batch, {first, count} along dim 0 of every
  // data input (its dp block; {0, batch} on one rank).
  std::pair<int64_t, int64_t> BatchRows() const { return rows_; }
  // Step and Evaluate given only this rank's rows of each data input (dim 0
  // of length BatchRows().second, the other dims global).
  absl::StatusOr<float> StepRows(const Batch& rows);
  absl::StatusOr<float> StepRows(const Tensor& x, const Tensor& y) { return StepRows(Batch{{"x", x}, {"y", y}}); }
  absl::StatusOr<float> EvaluateRows(const Batch& rows);
  // The evaluation program's (loss, logits) (logits: [batch * seq_len, vocab],
  // whole on every rank; empty when the model has none).
  absl::StatusOr<std::pair<float, Tensor>> Forward(const Batch& batch);
  absl::StatusOr<std::pair<float, Tensor>> Forward(const Tensor& x, const Tensor& y) {
    return Forward(Batch{{"x", x}, {"y", y}});
  }
  // Sampling: the rows SampleLogits takes (one per dp block when the model
  // can build a sampling graph, else the training batch), and the logits of token
  // ids x [SampleRows(), seq_len] as Forward gives them ([rows * seq_len,
  // vocab], whole on every rank). Collective like Forward; the sampling
  // program is compiled on the first call.
  int64_t SampleRows() const;
  absl::StatusOr<Tensor> SampleLogits(const Tensor& x);

  // device: cuda: the last Step's loss in place on the GPU (f32 [], valid
  // until the next Step), for averaging it across ranks through the CUDA
  // backend of a process group. FailedPrecondition on the CPU path.
  absl::StatusOr<Tensor> DeviceLoss();
  // device: cuda: reads that loss back (after a collective changed it).
  absl::StatusOr<float> ReadLoss();

  // Gradients of the last Step (needs keep_gradients), by parameter name;
  // with gradient accumulation, the mean over the micro-batches that the
  // update applied (whole tensors on every rank).
  std::map<std::string, Tensor> LastGradients() const;
  // This rank's block of each parameter (the whole tensors on one rank); on
  // device: cuda read back from the GPU.
  std::map<std::string, Tensor> LocalParameters() const;
  std::map<std::string, Tensor> Parameters() const { return LocalParameters(); }

  // What checkpoints need: every parameter and optimizer-state input of the
  // training program ("<param>.m", "<param>.v" share their parameter's global
  // shape), in program order, with this rank's block of it. The blocks are
  // the program's own tensors: CopyFrom into them, then StateChanged, sets
  // the state. On device: cuda the state lives on the GPU: State copies every
  // parameter and moment device -> host into those tensors first (the f32
  // master weights under train.precision: bf16; f32 whatever the storage
  // under train.memory: lean). The host holds no copy of the moments until
  // the first State() call: after the upload they live on the GPU only.
  struct StateTensor {
    std::string name;
    bool is_param = false;
    DType dtype = DType::kF32;  // of `local` (the program's input dtype)
    std::vector<int64_t> global_shape;
    dtensor::DTensorSpec spec;
    Tensor local;
  };
  absl::StatusOr<std::vector<StateTensor>> State() const;
  // State()'s entries without their data (`local` undefined): names, global
  // shapes and specs, read from nothing (no device copy).
  std::vector<StateTensor> StateLayout() const { return StateEntries(/*with_data=*/false); }
  // device: cuda: the state lives on the GPU, and checkpoints move it one
  // tensor at a time (so the host never holds all of it): ReadState gives a
  // fresh host copy of one entry's local block (f32), WriteState sets it on
  // the device. False on the CPU, where State()'s tensors are the program's.
  bool state_on_device() const { return cuda_ != nullptr; }
  absl::StatusOr<Tensor> ReadState(const std::string& name) const;
  absl::Status WriteState(const std::string& name, const Tensor& local);
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }  // after restoring State()
  // After CopyFrom into State()'s tensors: on device: cuda copies them host ->
  // device (the executor derives its bf16 copies of the parameters from the
  // f32 masters, as at the start); nothing to do on the CPU.
  absl::Status StateChanged();

  // This rank's block of a global tensor under `spec` (a contiguous copy).
  absl::StatusOr<Tensor> Block(const Tensor& global, const dtensor::DTensorSpec& spec) const;
  // The spec of every training-program input, by name (replicated on one rank).
  const std::map<std::string, dtensor::DTensorSpec>& specs() const { return specs_; }
  const Layout& layout() const { return layout_; }
  const dtensor::MeshShape& mesh() const { return mesh_; }
  int rank() const { return rank_; }

  const std::vector<compiler::models::ParamInfo>& param_info() const { return params_; }
  int64_t num_parameters() const { return compiler::models::NumParameters(params_); }
  double LearningRate(int64_t step) const;  // 1-based step
  // The training compilation's stages and memory plan (its program moved to
  // the executor; on device: cuda "fused" is what the CUDA executor lowered).
  const compiler::Compilation& compilation() const { return train_; }
  // The arena the training program runs in (the lowered program's memory
  // plan peak: in-place parameter and state updates outside it); on device:
  // cuda the compilation's plan of the fused graph.
  int64_t ArenaBytes() const;
  // The training program's graph: its inputs are in this order.
  const compiler::ir::Graph& train_graph() const;
  // Whether Forward returns logits (an imported model may output only its loss).
  bool has_logits() const { return has_logits_; }

 private:
  Trainer() = default;
  // A data input of a program: its index there and global shape.
  struct DataInput {
    std::string name;
    int index = -1;
    Shape global_shape;
    DType dtype = DType::kI32;
  };
  // A forward-only program sharing the training step's parameter and buffer
  // tensors; its data inputs are bound per call.
  struct EvalProgram {
    compiler::Compilation compilation;
    std::unique_ptr<compiler::Executor> exec;
    std::vector<Tensor> inputs;
    std::map<std::string, dtensor::DTensorSpec> specs;
    std::vector<DataInput> data;
  };
  absl::Status CompileSteps(TrainerModel& model);
  // batch: the forward's global batch (0: train.batch_size).
  absl::StatusOr<EvalProgram> CompileEval(const compiler::ir::Graph& forward, int64_t batch = 0) const;
  absl::Status BindTrainingInputs(TrainerModel& model);
  // same_rows: the program must split its batch into the training step's rows
  // (every program but the sampling one, whose batch is smaller).
  absl::Status BindEval(EvalProgram& p, bool same_rows = true) const;
  absl::StatusOr<std::vector<Tensor>> RunEval(EvalProgram& p, const Batch& batch, bool rows);
  absl::StatusOr<Tensor> InitBlock(size_t index, const dtensor::DTensorSpec& spec) const;
  // options_.init_blocks' block of parameter params_[index] under `spec`.
  absl::StatusOr<Tensor> ReadInitBlock(size_t index, const dtensor::DTensorSpec& spec) const;
  // The initial value of training input `in` under `spec` (this rank's block).
  absl::StatusOr<Tensor> InitialValue(const compiler::ir::GraphInput& in, const kernels::TensorMeta& local,
                                      const dtensor::DTensorSpec& spec, const TrainerModel& model,
                                      const std::map<std::string, size_t>& param_index) const;
  // Binds the batch to the program inputs `want` (this rank's block under
  // `specs` on a mesh of several ranks); `rows`: the batch holds only this
  // rank's rows (BatchRows).
  absl::Status SetBatch(const Batch& batch, bool rows, const std::vector<DataInput>& want,
                        const std::map<std::string, dtensor::DTensorSpec>& specs, std::vector<Tensor>& inputs);
  // The rows of dim 0 that `data` (a program's data inputs under `specs`)
  // give this rank; InternalError when they split the batch differently.
  absl::StatusOr<std::pair<int64_t, int64_t>> RowsOf(const std::vector<DataInput>& data,
                                                     const std::map<std::string, dtensor::DTensorSpec>& specs) const;
  absl::StatusOr<float> RunStep();  // the training step on the bound batch
  // Gradient accumulation (trainer_accum.cc): the update program and one
  // update over the micro-batches of `batch` (the batch of one update).
  absl::Status CompileUpdate(const compiler::AdamWOptions& adam);
  absl::Status BindUpdate();
  absl::StatusOr<float> AccumulateStep(const Batch& batch, bool rows);
  // device: cuda: copies the parameters back into the host tensors (which the
  // evaluation program shares) when a step changed them.
  absl::Status SyncFromDevice() const;
  // device: cuda: the indices of the training inputs that live on the GPU
  // and checkpoints hold (parameters and optimizer state).
  std::vector<int> DeviceStateInputs() const;
  bool single() const { return mesh_.num_ranks() == 1; }
  std::vector<StateTensor> StateEntries(bool with_data) const;

  v1::JobSpec spec_;
  TrainerOptions options_;
  Layout layout_;
  dtensor::MeshShape mesh_;
  int rank_ = 0;
  std::vector<int64_t> coords_;
  std::vector<compiler::models::ParamInfo> params_;
  bool has_logits_ = true;

  compiler::Compilation train_;
  std::unique_ptr<compiler::Executor> train_exec_;
  EvalProgram eval_;
  // Several ranks: the evaluation forward with logits, and its program once
  // Forward has compiled it.
  compiler::ir::Graph logits_forward_;
  std::unique_ptr<EvalProgram> logits_;
  // The model's sampling graph builder (TrainerModel::sample_forward) and the
  // program once SampleLogits has compiled it.
  std::function<absl::StatusOr<compiler::ir::Graph>(int64_t rows)> sample_forward_;
  std::unique_ptr<EvalProgram> sample_;
  std::unique_ptr<compiler::cuda::CudaExecutor> cuda_;  // device: cuda
  mutable bool host_stale_ = false;
  mutable std::vector<Tensor> train_inputs_;
  std::vector<Tensor> outputs_;
  std::map<std::string, dtensor::DTensorSpec> specs_;  // training inputs
  std::vector<DataInput> train_data_;
  std::pair<int64_t, int64_t> rows_{0, 0};  // BatchRows()
  int lr_in_ = -1, step_in_ = -1;
  int dropout_step_in_ = -1;  // an imported model's dropout offset (onnx/training.h)
  int64_t step_ = 0;
  // train.grad_accum_steps; above 1 the training program is the micro-step
  // and `update_` applies the optimizer.
  int64_t accum_ = 1;
  struct UpdateProgram {
    compiler::Compilation compilation;
    std::unique_ptr<compiler::Executor> exec;
    std::vector<Tensor> inputs, outputs;
    std::vector<Tensor> accumulators;  // the mean gradients' inputs, in params_ order
    std::vector<Batch> micro;          // the micro-batches of the last update
    int lr_in = -1, step_in = -1;
  } update_;
};

}  // namespace loom::parallel
