// The training data of a job: what data.* names, split into training and
// validation samples, drawn in a resumable order and turned into batches of
// the job's kind.
//
//   LOOM_ASSIGN_OR_RETURN(auto data, Dataset::Open(spec));
//   Batch b = data->NewBatch(rows);            // this rank's rows of a global batch
//   LOOM_RETURN_IF_ERROR(data->Next(global, first_row, &b));
//   trainer.Step(b.x(), b.y());
//
// Pieces: shards.h (paths, formats, the mapped token source), pairs.h (.npy
// records), sampler.h (samples, the split, the order), batch.h (batch kinds).
//
// Splits: data.val names validation shards (for pairs: data.val and
// data.val_labels); otherwise data.val_fraction of the samples, chosen by
// seeded groups of about kSplitBlock tokens (sampler.h: SplitByFraction,
// seeded by data.seed).
//
// Rank-aware draws: Next(global, first_row, out) fills out's rows with rows
// [first_row, first_row + out.rows()) of the next global batch of `global`
// samples and advances the order by `global`. Every data-parallel rank keeps
// the same sampler state and reads only its own rows, so N ranks see exactly
// the batches of the single-process run. The order is seeded by train.seed.
//
// Ids: built-in model families take ids in [0, model.vocab) (and labels that
// may also be -100, the ignore_index of their loss); every id is checked when
// read, with the file and byte offset in the error. ScanIds checks a whole
// dataset up front when it is small (`loom train`, each `loom worker` and
// `loom submit` scan up to kScanLimitBytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/data/batch.h"
#include "runtime/data/pairs.h"
#include "runtime/data/sampler.h"
#include "runtime/data/shards.h"

namespace loom::runtime::data {

inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";
inline constexpr int64_t kScanLimitBytes = 64ll << 20;
inline constexpr int64_t kPairSplitGroup = 64;  // records per split group of a fraction split of pairs

class Dataset {
 public:
  // Opens and checks data.* of a spec with defaults applied (headers, record
  // shapes against the model, split sizes). Errors name the spec field.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const v1::JobSpec& spec);

  Kind kind() const { return kind_; }
  Sampler& sampler() { return sampler_; }
  const Sampler& sampler() const { return sampler_; }
  int64_t train_samples() const { return train_set_.size(); }
  int64_t val_samples() const { return val_set_.size(); }
  std::string Summary() const;  // one line: path, format, shards, tokens, samples

  // Tensors for `rows` rows of a batch, named by data.inputs.
  Batch NewBatch(int64_t rows) const;
  // See the top of this file. first_row + out->rows() <= global.
  absl::Status Next(int64_t global, int64_t first_row, Batch* out);
  // Fixed validation batch `index` (rows [first_row, ...) of it): samples
  // index * global + row, wrapping around the validation set.
  absl::Status Validation(int64_t index, int64_t global, int64_t first_row, Batch* out) const;
  // Checks every id when the data takes at most max_bytes; *scanned says if it did.
  absl::Status ScanIds(int64_t max_bytes, bool* scanned) const;

  // Token windows (causal and mlm): window_tokens() ids of sample i of the
  // training (val = false) or validation set.
  int64_t window_tokens() const { return need_; }
  absl::Status ReadWindow(bool val, int64_t i, int32_t* out) const;

 private:
  Dataset() = default;
  absl::Status OpenTokens(const v1::JobSpec& spec);
  absl::Status OpenPairs(const v1::JobSpec& spec);
  absl::Status FillRow(bool val, int64_t sample, uint64_t draw, int64_t row, Batch* out) const;

  Kind kind_ = Kind::kCausal;
  std::string path_, x_name_ = "x", y_name_ = "y";
  int64_t seq_len_ = 0, need_ = 0;
  int64_t vocab_ = 0;        // ids read must be below this (built-in families: model.vocab; else int32 max)
  int64_t model_vocab_ = 0;  // the range of MLM's random replacement ids
  uint64_t seed_ = 0;
  MlmOptions mlm_;
  std::unique_ptr<TokenSource> train_src_, val_src_;  // val_src_ null: validation windows come from train_src_
  std::unique_ptr<PairSource> train_pairs_, val_pairs_;
  SampleSet train_set_, val_set_;
  Sampler sampler_ = *Sampler::Create(1, 0);
  mutable std::vector<int32_t> scratch_;  // one window
};

// The check `loom submit` makes before it sends a job: opens data.* and
// checks every id when the data takes at most kScanLimitBytes.
absl::Status CheckData(const v1::JobSpec& spec);

std::string DecodeBytes(const std::vector<int32_t>& tokens);  // byte tokens back to text

}  // namespace loom::runtime::data
