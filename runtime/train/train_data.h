// The data side of a training run, shared by `loom train` and the ranks of
// `loom worker`: opening data.* and the bigram baseline line.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "proto/loom/v1/job.pb.h"
#include "runtime/data/dataset.h"

namespace loom::runtime::train {

// Opens data.* (data::Dataset::Open) and checks every id up front when the
// data takes at most data::kScanLimitBytes (larger data is checked as it is
// read). With `print`, prints the one-line summary. Errors are bad input.
absl::StatusOr<std::unique_ptr<data::Dataset>> OpenTrainingData(const v1::JobSpec& spec, bool print);

// The bigram baseline of a causal LM (data/bigram.h) with the limits of
// data.bigram, and a log line when `print`. NaN when it does not apply
// (data.kind is not causal), data.bigram.skip is set, or it was skipped.
absl::StatusOr<double> BaselineLoss(const data::Dataset& d, const v1::JobSpec& spec, bool print);

}  // namespace loom::runtime::train
