// The training run of one rank of a multi-rank job (`loom worker`, world > 1,
// or a world of one that a test drives directly).
//
// Every rank builds the (dp, tp) device mesh over the world process group and
// binds a communicator per mesh dimension (on device: cuda they carry the
// training step's collectives on the GPU's buffers through the group's CUDA
// backend, and the evaluation step's on the host through its CPU backend),
// then runs the training loop that
// `loom train` runs too (runtime/train/train_loop.h): the trainer core
// compiled for the layout (parallel/trainer.h), the same global batches as
// the single-process run (same sampler and seed; each rank uses its block),
// checkpoints and resume under any layout, validation every eval_every steps.
// Rank 0 reports: progress lines, the run folder's metrics (run_reporter.h)
// and LOOM_PROGRESS_FILE. Returns the worker's exit code (0, 1 runtime
// failure, 2 bad configuration); failures also go to LOOM_ERROR_FILE.
// Checkpoints commit through `gate` when given (a stopping worker closes it:
// no checkpoint is committed after that).
#pragma once

#include <memory>

#include "collectives/process_group.h"
#include "parallel/planner.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/checkpoint/checkpoint.h"

namespace loom::runtime::launch {

// `plan` (optional): the tp: auto plan that chose the spec's layout; rank 0
// writes it into the run folder (plan.txt, plan.json). `cuda_device`
// (device: cuda): the CUDA ordinal of this rank's GPU (rank_gpu.h).
int RunParallelTraining(const v1::JobSpec& spec, std::shared_ptr<collectives::ProcessGroup> world,
                        checkpoint::CommitGate* gate = nullptr, const parallel::Plan* plan = nullptr,
                        int cuda_device = 0);

}  // namespace loom::runtime::launch
