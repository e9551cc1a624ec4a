#include "runtime/service/job_metrics.h"

#include <algorithm>

namespace loom::runtime::service {

JobMetrics::JobMetrics(size_t max_points_per_job, size_t kept_finished_jobs)
    : max_points_(std::max<size_t>(2, max_points_per_job)), kept_finished_(kept_finished_jobs) {}

uint64_t JobMetrics::Add(int64_t job, const v1::MetricPoint& p) {
  std::vector<Point>& s = series_[job];
  if (s.size() >= max_points_) Thin(s);
  s.push_back({++seq_, p});
  return seq_;
}

void JobMetrics::Thin(std::vector<Point>& series) const {
  const size_t old_half = series.size() / 2;
  std::vector<Point> kept;
  kept.reserve(series.size());
  for (size_t i = 0; i < series.size(); ++i) {
    if (i >= old_half || i % 2 == 0) kept.push_back(std::move(series[i]));
  }
  series = std::move(kept);
}

std::vector<v1::MetricPoint> JobMetrics::After(int64_t job, int64_t after_step) const {
  std::vector<v1::MetricPoint> out;
  auto it = series_.find(job);
  if (it == series_.end()) return out;
  for (const Point& p : it->second) {
    if (p.point.step() > after_step) out.push_back(p.point);
  }
  std::stable_sort(out.begin(), out.end(), [](const v1::MetricPoint& a, const v1::MetricPoint& b) {
    return a.step() != b.step() ? a.step() < b.step() : a.rank() < b.rank();
  });
  return out;
}

std::vector<JobMetrics::Point> JobMetrics::PointsAfterSeq(int64_t job, uint64_t seq) const {
  std::vector<Point> out;
  auto it = series_.find(job);
  if (it == series_.end()) return out;
  for (const Point& p : it->second) {
    if (p.seq > seq) out.push_back(p);
  }
  return out;
}

const v1::MetricPoint* JobMetrics::LatestWithLoss(int64_t job) const {
  auto it = series_.find(job);
  if (it == series_.end()) return nullptr;
  for (auto p = it->second.rbegin(); p != it->second.rend(); ++p) {
    if (p->point.has_loss()) return &p->point;
  }
  return nullptr;
}

const v1::MetricPoint* JobMetrics::LatestWithTokensPerS(int64_t job) const {
  auto it = series_.find(job);
  if (it == series_.end()) return nullptr;
  for (auto p = it->second.rbegin(); p != it->second.rend(); ++p) {
    if (p->point.has_tokens_per_s()) return &p->point;
  }
  return nullptr;
}

void JobMetrics::Finished(int64_t job) {
  if (std::find(finished_.begin(), finished_.end(), job) != finished_.end()) return;
  finished_.push_back(job);
  while (finished_.size() > kept_finished_) {
    series_.erase(finished_.front());
    finished_.pop_front();
  }
}

size_t JobMetrics::size(int64_t job) const {
  auto it = series_.find(job);
  return it == series_.end() ? 0 : it->second.size();
}

}  // namespace loom::runtime::service
