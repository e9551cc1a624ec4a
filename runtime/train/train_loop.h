// The training run that `loom train` (one process, train_command.h) and
// `loom worker` (one rank of a job, runtime/launch/parallel_train.h) share.
//
// Every rank, in order:
//   1. opens data.* (train_data.h, runtime/data: every rank holds the same
//      sampler state);
//   2. builds the model's graphs (job_model.h) and the trainer core for the
//      spec's layout (parallel/trainer.h), its parameters from init_from
//      (this rank's block of each, checkpoint/init_from.h) unless a
//      checkpoint will be resumed;
//   3. with checkpoint.dir, resumes from its newest checkpoint
//      (checkpointer.h; rank 0 first removes .tmp leftovers and moves unusable
//      checkpoints aside) and continues with exactly the next batch;
//   4. trains to train.steps: this rank's rows of the global batch from the
//      dataset (Trainer::BatchRows), a step at the schedule's learning rate,
//      the loss averaged across a one-rank GPU job's group, a checkpoint every
//      checkpoint.every steps, validation every train.eval_every steps and at
//      the last one;
//   5. samples text and gathers the whole parameters for model.safetensors.
// Rank 0 reports (run_reporter.h: progress lines, the run folder, metrics,
// LOOM_PROGRESS_FILE, tp: auto's plan). Steps, validation, checkpoints, the
// sample and the final gather are collective on a mesh of several ranks.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "collectives/process_group.h"
#include "compiler/comm/communicator.h"
#include "dtensor/device_mesh.h"
#include "parallel/planner.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/checkpoint/checkpoint.h"

namespace loom::runtime::train {

struct TrainingRun {
  v1::JobSpec spec;             // with the driver's overrides applied
  std::string command;          // "loom train" or "loom worker": the prefix of messages
  int rank = 0;                 // in the mesh of spec.parallel (dp, tp)
  // The job's ranks; null for one process without a group (`loom train`).
  // With device: cuda and one rank, the step's loss is averaged across it on
  // the GPU through its CUDA backend (NCCL under "cpu:gloo,cuda:nccl"); on a
  // mesh of several ranks the training program's loss is the global one on
  // every rank already.
  collectives::ProcessGroup* world = nullptr;
  int cuda_device = 0;  // device: cuda: this rank's CUDA ordinal (TrainerOptions::cuda_device)
  const dtensor::DeviceMesh* mesh = nullptr;  // over world, when the layout has several ranks
  compiler::comm::CommunicatorMap comms;      // one per mesh dim of size > 1
  std::string run_dir;                        // rank 0's run folder (RunFolder(spec))
  std::string metrics_listen;                 // rank 0 serves /metrics there; "" = off
  // Checkpoints commit through it when set (`loom worker` closes it on
  // SIGTERM: no checkpoint commits after that). Must outlive the run.
  checkpoint::CommitGate* gate = nullptr;
  // tp: auto's plan (runtime/plan) that chose the layout, or null: rank 0
  // writes it into the run folder (plan.txt, plan.json).
  const parallel::Plan* plan = nullptr;
};

// Runs the job to its end and returns the exit code: 0, 1 a runtime failure,
// 2 bad input or configuration (the message names the field). Failures go to
// stderr and to LOOM_ERROR_FILE (the job's root cause under an agent).
int RunTraining(const TrainingRun& run);

// Prints "<who>: <msg>" to stderr, writes msg to LOOM_ERROR_FILE when it is
// set, and returns `code`.
int FailRun(absl::string_view who, int code, absl::string_view msg);

}  // namespace loom::runtime::train
