// Evaluation of a training run (train_loop.h): validation loss over the
// validation batches, a text sample (causal LMs) and the model file. The
// trainer may be one rank of a parallel job: ValidationLoss, SampleText and
// FinishWithSample run its evaluation program, so every rank of the mesh
// calls them in the same order (each gets the same loss and logits).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"
#include <map>

#include "parallel/trainer.h"
#include "runtime/data/dataset.h"

namespace loom::runtime::train {

// Mean loss over train.eval_batches fixed validation batches (any data.kind);
// each rank reads only its rows of each batch (Trainer::BatchRows).
absl::StatusOr<double> ValidationLoss(parallel::Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset);

// How SampleTokens picks each next token.
struct SampleOptions {
  int tokens = 200;          // how many to generate
  double temperature = 0.8;  // 0: greedy (the most likely id, the first on ties)
  int top_k = 0;             // > 0: draw among the k most likely ids only
  uint64_t seed = 0;         // the same seed gives the same tokens
};

// `o.tokens` ids after `prompt` (non-empty; the last seq_len ids are the
// context), from row 0 of the sampling program (Trainer::SampleLogits: one
// row per dp block, not the whole training batch). Only ids below `vocab`
// (the tokenizer's size: ids past it have no text) are drawn.
absl::StatusOr<std::vector<int32_t>> SampleTokens(parallel::Trainer& t, const v1::JobSpec& spec,
                                                  std::vector<int32_t> prompt, const SampleOptions& o, int64_t vocab);

// `n` tokens after `prompt`, sampled with temperature 0.8 (seeded by
// train.seed), the prompt and the continuation decoded with the job's
// tokenizer (data.tokenizer, data/tokenizer.h); when the prompt holds ids
// the tokenizer has no text for (token-id data and no data.tokenizer), the
// ids as numbers.
absl::StatusOr<std::string> SampleText(parallel::Trainer& t, const v1::JobSpec& spec, std::vector<int32_t> prompt,
                                       int n);

// Whole parameters (`params`, by name; every one of `info`) as one
// safetensors file under Loom's names (f32, metadata format=pt and
// loom.family), atomically; `loom export --format hf` and `init_from` read it.
absl::Status WriteModel(const std::map<std::string, Tensor>& params,
                        const std::vector<compiler::models::ParamInfo>& info, const v1::JobSpec& spec,
                        const std::string& path);

// Prints the final validation loss (and the baseline unless it is NaN); for
// causal LMs with logits samples after the start of the first validation
// window (every rank). Where `dir` is not empty (the reporting rank), writes
// <dir>/sample.txt and <dir>/model.safetensors (WriteModel of `params`, the
// whole parameters) and prints the loss, the sample and the run folder.
absl::Status FinishWithSample(parallel::Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset,
                              const std::map<std::string, Tensor>& params, const std::string& dir, double val_loss,
                              double baseline);

}  // namespace loom::runtime::train
