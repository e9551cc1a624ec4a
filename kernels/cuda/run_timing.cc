#include "kernels/cuda/run_timing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status.h"
#include "kernels/cuda/device_runtime.h"

namespace loom::kernels::cuda {

int TimingRunsPerBatch(double estimate_ms) {
  if (!(estimate_ms > 0)) return kTimingMaxRuns;
  const double runs = std::ceil(kTimingBatchMs / estimate_ms);
  return static_cast<int>(std::clamp(runs, 1.0, static_cast<double>(kTimingMaxRuns)));
}

namespace {

// Milliseconds from the first event's record to the second's, after `runs`
// runs between them.
absl::StatusOr<double> TimeBatch(StreamHandle stream, const std::function<absl::Status()>& run, int runs,
                                 StreamEvent& start, StreamEvent& end) {
  LOOM_RETURN_IF_ERROR(start.Record(stream));
  for (int i = 0; i < runs; ++i) LOOM_RETURN_IF_ERROR(run());
  LOOM_RETURN_IF_ERROR(end.Record(stream));
  LOOM_RETURN_IF_ERROR(end.Synchronize());
  LOOM_ASSIGN_OR_RETURN(float ms, end.ElapsedMsSince(start));
  return static_cast<double>(ms);
}

}  // namespace

absl::StatusOr<double> TimeRuns(StreamHandle stream, const std::function<absl::Status()>& run) {
  LOOM_ASSIGN_OR_RETURN(StreamEvent start, StreamEvent::Create());
  LOOM_ASSIGN_OR_RETURN(StreamEvent end, StreamEvent::Create());
  LOOM_RETURN_IF_ERROR(run());  // warm-up (and module loads)
  LOOM_ASSIGN_OR_RETURN(double estimate, TimeBatch(stream, run, 1, start, end));
  const int runs = TimingRunsPerBatch(estimate);
  double best = -1;
  for (int b = 0; b < kTimingBatches; ++b) {
    LOOM_ASSIGN_OR_RETURN(double ms, TimeBatch(stream, run, runs, start, end));
    if (best < 0 || ms < best) best = ms;
  }
  return best / runs;
}

}  // namespace loom::kernels::cuda
