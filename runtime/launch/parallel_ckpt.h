// Checkpoint and resume for the multi-rank training loop (parallel_train.cc).
//
// ParallelState wraps the rank's ParallelTrainer (parallel/trainer.h): it
// steps it, saves the parameter and AdamW state blocks held in the trainer's
// program inputs, and restores them (and the step count) in place.
//
// Saved tensors: every program input except x, y, lr and step, i.e. the
// parameters and their AdamW moments "<param>.m" / "<param>.v" (same global
// shape as the parameter). Each rank writes the block it owns under its
// DTensorSpec; a tensor replicated along a mesh dim is written only by the
// ranks with coordinate 0 on that dim, so each element is written once.
//
// Save protocol (checkpoint.h does the atomic commit):
//   rank 0: BeginSave -> barrier -> every rank: WriteRankShards + a records
//   file "<tmp>/.records.RRRRR" -> barrier -> rank 0 reads the records,
//   removes them, builds the manifest and CommitSave (retention = keep).
// Initial parameters: with init_from set and no checkpoint to resume, Create
// reads this rank's block of every parameter from that file (in Loom's or
// Hugging Face's layout); the AdamW moments start from zero.
// Resume: rank 0 first removes .tmp leftovers and moves committed folders
// newer than the newest usable one aside (checkpoint::QuarantineUnusable), so
// the run can save those steps again; then every rank picks the newest
// complete checkpoint (LoadLatest, full checksum verification) and reads only
// ITS block under ITS layout (rectangular reads), so a checkpoint saved under
// any mesh loads under any other.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/process_group.h"
#include "parallel/trainer.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/loader.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/data/dataset.h"

namespace loom::launch {

class ParallelState {
 public:
  static absl::StatusOr<std::unique_ptr<ParallelState>> Create(const v1::JobSpec& spec,
                                                               parallel::ParallelTrainer& trainer,
                                                               const dtensor::MeshShape& mesh, int rank);
  // One training step on the GLOBAL batch (this rank's dp block of it); step() + 1.
  absl::StatusOr<float> Step(const Tensor& x, const Tensor& y) { return trainer_->Step(x, y); }
  // The same step given only this rank's rows of the global batch (ParallelTrainer::StepRows).
  absl::StatusOr<float> StepRows(const Tensor& x, const Tensor& y) { return trainer_->StepRows(x, y); }
  int64_t step() const { return trainer_->step(); }

  // Collective over `world`: every rank calls it with the same arguments.
  // When it fails, rank 0 removes the save's temporary folder (a full disk
  // leaves no .tmp behind). `gate` (optional) is the process's commit gate.
  absl::Status Save(const std::string& root, const data::SamplerState& sampler, int keep,
                    collectives::ProcessGroup& world, checkpoint::CommitGate* gate = nullptr);
  // Loads the newest complete checkpoint under root into this rank's blocks and
  // restores `sampler`; returns its step, or 0 when root holds no checkpoint.
  // `log` gets a line about what was loaded (and what was skipped). `chosen`:
  // the newest usable checkpoint when the caller has verified it already.
  absl::StatusOr<int64_t> Restore(const std::string& root, data::Sampler* sampler, std::string* log,
                                  const checkpoint::LoadResult* chosen = nullptr);

  // This rank's block of each parameter (as held now).
  std::map<std::string, Tensor> LocalParameters() const;

 private:
  ParallelState() = default;
  // This rank's block of every parameter from the file (checkpoint/init_from.h).
  absl::Status LoadInit(const std::string& path, const std::map<std::string, std::vector<int64_t>>& params);
  // Save without the cleanup after a failure.
  absl::Status SaveSteps(const std::string& root, const std::string& tmp, const data::SamplerState& sampler, int keep,
                         collectives::ProcessGroup& world, checkpoint::CommitGate* gate);
  struct Saved {
    int input = -1;
    std::string name;
    std::vector<int64_t> global_shape;
    dtensor::DTensorSpec spec;
  };
  v1::JobSpec spec_;
  parallel::ParallelTrainer* trainer_ = nullptr;
  dtensor::MeshShape mesh_;
  int rank_ = 0;
  std::vector<int64_t> coords_;
  std::vector<Saved> saved_;
};

}  // namespace loom::launch
