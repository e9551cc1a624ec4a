// How Loom's choices made by timing (cuBLASLt algorithms, cuDNN's attention
// engine configs, the SDPA dispatcher's candidates) measure a candidate on
// its stream: one warm-up run, one run to estimate its length, then
// kTimingBatches batches of TimingRunsPerBatch(estimate) runs, each batch
// between two events; the result is the fastest batch's milliseconds per
// run. A batch lasts about kTimingBatchMs, so a 60 us kernel is averaged
// over several runs instead of read from one, whose jitter is a few
// percent: the size of the gaps these choices decide.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "kernels/cuda/caching_allocator.h"

namespace loom::kernels::cuda {

inline constexpr int kTimingBatches = 3;
inline constexpr double kTimingBatchMs = 0.3;
inline constexpr int kTimingMaxRuns = 64;

// Runs a batch of kTimingBatchMs holds, given one run's estimate: 1 to
// kTimingMaxRuns (kTimingMaxRuns for an estimate of 0 or less).
int TimingRunsPerBatch(double estimate_ms);

// Milliseconds per run of run() on `stream` (the caller's current device),
// timed as above. run() enqueues one run; its error, or a CUDA error, is
// returned as is (Unavailable without CUDA).
absl::StatusOr<double> TimeRuns(StreamHandle stream, const std::function<absl::Status()>& run);

}  // namespace loom::kernels::cuda
