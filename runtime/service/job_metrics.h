// The coordinator's in-memory series of per-step training metrics
// (loss, val loss, learning rate, tokens/s, step time per rank), fed by
// NodeService.ReportMetrics and read by the dashboard's API.
//
// Retention is bounded two ways:
//   - per job at most kMaxPointsPerJob points: when a series is full, every
//     second point of its older half is dropped, so old history thins evenly
//     while recent steps stay dense;
//   - a finished job's series is kept for the kKeptFinishedJobs most recently
//     finished jobs, then dropped with the job's other live state.
// The series are not persisted: a coordinator restart starts them empty.
//
// Every point gets a sequence number, increasing over all jobs, so a reader
// can ask for the points it has not seen yet (PointsAfterSeq).
//
// Not thread-safe: the coordinator's mutex guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "proto/loom/v1/service.pb.h"

namespace loom::runtime::service {

class JobMetrics {
 public:
  static constexpr size_t kMaxPointsPerJob = 4096;
  static constexpr size_t kKeptFinishedJobs = 64;

  struct Point {
    uint64_t seq = 0;
    v1::MetricPoint point;
  };

  explicit JobMetrics(size_t max_points_per_job = kMaxPointsPerJob, size_t kept_finished_jobs = kKeptFinishedJobs);

  // Appends `p` to `job`'s series; returns its sequence number.
  uint64_t Add(int64_t job, const v1::MetricPoint& p);
  // Points with step > after_step, ascending by step (then rank, arrival).
  std::vector<v1::MetricPoint> After(int64_t job, int64_t after_step) const;
  // Points that arrived after sequence number `seq`, in arrival order.
  std::vector<Point> PointsAfterSeq(int64_t job, uint64_t seq) const;
  // The most recent point with a loss (or with tokens/s) of `job`; nullptr if none.
  const v1::MetricPoint* LatestWithLoss(int64_t job) const;
  const v1::MetricPoint* LatestWithTokensPerS(int64_t job) const;
  // `job` finished: its series goes once kept_finished_jobs later jobs finish.
  void Finished(int64_t job);
  size_t size(int64_t job) const;
  uint64_t last_seq() const { return seq_; }

 private:
  void Thin(std::vector<Point>& series) const;

  size_t max_points_;
  size_t kept_finished_;
  uint64_t seq_ = 0;
  std::map<int64_t, std::vector<Point>> series_;
  std::deque<int64_t> finished_;
};

}  // namespace loom::runtime::service
