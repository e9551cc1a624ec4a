// The end of a training run on one process: validation loss over the
// validation split, and a text sample, from a single-process Trainer (also
// used by a parallel job's rank 0 on the gathered parameters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/train/trainer.h"

namespace loom::train {

// Mean loss over train.eval_batches fixed windows of `val`.
absl::StatusOr<double> ValidationLoss(Trainer& t, const v1::JobSpec& spec, const std::vector<int32_t>& val);

// `n` tokens after `prompt`, sampled with temperature 0.8 (seeded by
// train.seed), decoded as bytes.
absl::StatusOr<std::string> SampleText(Trainer& t, const v1::JobSpec& spec, std::vector<int32_t> prompt, int n);

// The trainer's parameters as one safetensors file under Loom's names (f32,
// metadata format=pt and loom.family), atomically; `loom export --format hf`
// and `init_from` read it.
absl::Status WriteModel(const Trainer& t, const v1::JobSpec& spec, const std::string& path);

// Samples from the start of `val`, writes <dir>/sample.txt and
// <dir>/model.safetensors (WriteModel) and prints the final validation loss,
// the sample and the run folder.
absl::Status FinishWithSample(Trainer& t, const v1::JobSpec& spec, const std::vector<int32_t>& val,
                              const std::string& dir, double val_loss, double baseline);

}  // namespace loom::train
