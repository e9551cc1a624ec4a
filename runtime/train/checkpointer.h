// Checkpoint and resume for the training loop (train_loop.h), on one process
// or on every rank of a parallel job.
//
// A Checkpointer saves and restores the training state of a Trainer
// (parallel/trainer.h: State()): every parameter and its AdamW moments
// "<param>.m" / "<param>.v" (same global shape as the parameter), as this
// rank's block under its DTensorSpec, and the step count. A tensor
// replicated along a mesh dim is written only by the ranks with coordinate 0
// on that dim, so each element is written once; on one process every tensor
// is one whole shard.
//
// On device: cuda the same tensors go through the host: State() copies the
// GPU's parameters and moments (bf16 runs: the f32 masters) device -> host
// before a save, and Restore hands the loaded blocks to the GPU
// (Trainer::StateChanged), so a checkpoint does not say which device wrote
// it and resumes on either.
//
// Save protocol (checkpoint.h does the atomic commit):
//   rank 0: BeginSave -> barrier -> every rank: WriteRankShards + a records
//   file "<tmp>/.records.RRRRR" -> barrier -> rank 0 reads the records,
//   removes them, builds the manifest and CommitSave (retention = keep).
//   On one process (no world) the barriers are skipped.
//   A failed save leaves no .tmp behind (rank 0 removes it); a closed commit
//   gate (the worker's SIGTERM) lets no save commit.
// Resume: the caller's rank 0 first prepares the folder (train_loop.cc:
// checkpoint::CleanStale and checkpoint::PrepareResume move unusable
// checkpoints aside); then every rank loads the newest usable checkpoint (the
// one rank 0 chose, else LoadLatest with full checksum verification) and
// reads only ITS block under ITS layout (rectangular reads), so a checkpoint
// saved under any mesh (one process included) loads under any other.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/process_group.h"
#include "parallel/trainer.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/data/dataset.h"

namespace loom::runtime::train {

class Checkpointer {
 public:
  // `world`: the job's ranks (the trainer's mesh over them), or null for one
  // process. Both must outlive the Checkpointer.
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Create(const v1::JobSpec& spec, parallel::Trainer& trainer,
                                                              collectives::ProcessGroup* world);

  // Collective over the world: every rank calls it with the same arguments.
  // `gate` (optional): the process's commit gate. When the save fails, rank
  // 0 removes its temporary folder.
  absl::Status Save(const std::string& root, const data::SamplerState& sampler, int keep,
                    checkpoint::CommitGate* gate = nullptr);
  // Loads the newest complete checkpoint under root into this rank's blocks and
  // restores `sampler` and the trainer's step; returns its step, or 0 when
  // root holds no checkpoint. `log` gets a line about what was loaded (and
  // what was skipped). `chosen`: the newest usable checkpoint when the caller
  // has verified it already.
  absl::StatusOr<int64_t> Restore(const std::string& root, data::Sampler* sampler, std::string* log,
                                  const checkpoint::LoadResult* chosen = nullptr);

 private:
  Checkpointer() = default;
  // What a checkpoint holds of the trainer: its State() (no partial specs),
  // or on a GPU its StateLayout(), whose tensors a save reads and a restore
  // writes one at a time.
  absl::StatusOr<std::vector<parallel::Trainer::StateTensor>> Saved() const;
  absl::Status Barrier();
  // Save without the cleanup after a failure.
  absl::Status SaveSteps(const std::string& root, const std::string& tmp, const data::SamplerState& sampler, int keep,
                         checkpoint::CommitGate* gate);
  v1::JobSpec spec_;
  parallel::Trainer* trainer_ = nullptr;
  collectives::ProcessGroup* world_ = nullptr;
  std::vector<int64_t> coords_;
};

}  // namespace loom::runtime::train
