// The end of a training run on one process: validation loss over the
// validation split, and (causal LMs) a text sample, from a single-process
// Trainer (also used by a parallel job's rank 0 on the gathered parameters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/data/dataset.h"
#include "runtime/train/trainer.h"

namespace loom::train {

// Mean loss over train.eval_batches fixed validation batches (any data.kind).
absl::StatusOr<double> ValidationLoss(Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset);

// How SampleTokens picks each next token.
struct SampleOptions {
  int tokens = 200;          // how many to generate
  double temperature = 0.8;  // 0: greedy (the most likely id, the first on ties)
  int top_k = 0;             // > 0: draw among the k most likely ids only
  uint64_t seed = 0;         // the same seed gives the same tokens
};

// `o.tokens` ids after `prompt` (non-empty; the last seq_len ids are the
// context), from row 0 of the evaluation program. Only ids below `vocab`
// (the tokenizer's size: ids past it have no text) are drawn.
absl::StatusOr<std::vector<int32_t>> SampleTokens(Trainer& t, const v1::JobSpec& spec, std::vector<int32_t> prompt,
                                                  const SampleOptions& o, int64_t vocab);

// `n` tokens after `prompt`, sampled with temperature 0.8 (seeded by
// train.seed), the prompt and the continuation decoded with the job's
// tokenizer (data.tokenizer, data/tokenizer.h); when the prompt holds ids
// the tokenizer has no text for (token-id data and no data.tokenizer), the
// ids as numbers.
absl::StatusOr<std::string> SampleText(Trainer& t, const v1::JobSpec& spec, std::vector<int32_t> prompt, int n);

// The trainer's parameters as one safetensors file under Loom's names (f32,
// metadata format=pt and loom.family), atomically; `loom export --format hf`
// and `init_from` read it.
absl::Status WriteModel(const Trainer& t, const v1::JobSpec& spec, const std::string& path);

// Prints the final validation loss (and the baseline unless it is NaN) and
// the run folder; for causal LMs with logits also samples after the start of
// the first validation window and writes <dir>/sample.txt; writes
// <dir>/model.safetensors (WriteModel).
absl::Status FinishWithSample(Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset,
                              const std::string& dir, double val_loss, double baseline);

}  // namespace loom::train
