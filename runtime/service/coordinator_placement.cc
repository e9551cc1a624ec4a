// What a placement backend other than the agents reports (placement::Sink),
// applied through the coordinator's one lifecycle: the store's allowed
// transitions, FinishLocked for the end, the same events and metrics.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "runtime/service/coordinator.h"

namespace loom::runtime::service {

void Coordinator::Placed(int64_t job, const std::string& ref, const std::string& log_path, const std::string& where) {
  if (absl::Status s = store_->SetPlacementRef(job, ref); !s.ok())
    std::fprintf(stderr, "loom coordinator: %s: cannot store its placement '%s': %s\n", FormatJobId(job).c_str(),
                 ref.c_str(), std::string(s.message()).c_str());
  if (!log_path.empty()) (void)store_->AddLog({job, 0, "stdout", log_path});
  (void)store_->AppendEvent(job, where);
  std::lock_guard<std::mutex> l(mu_);
  NotifyLocked();
}

bool Coordinator::AdvanceToRunningLocked(int64_t id, const std::string& msg) {
  for (int hop = 0; hop < 3; ++hop) {
    auto r = store_->GetJob(id);
    if (!r.ok() || store::IsTerminal(r->state)) return false;
    if (r->state == v1::RUNNING) return true;
    const v1::JobState next = r->state == v1::PENDING ? v1::SCHEDULED : v1::RUNNING;
    auto u = store_->Update(
        id,
        [&](store::JobRecord& j) {
          j.state = next;
          j.wait_reason.clear();
        },
        msg);
    if (!u.ok()) return false;
    if (next == v1::SCHEDULED) {
      live_[id].last_wait_reason.clear();
      if (m_sched_latency_) {
        const int64_t now =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        m_sched_latency_->With({}).Observe((now - u->submit_ms) / 1000.0);
      }
    }
  }
  return false;
}

void Coordinator::Observe(const placement::Observation& o) {
  std::lock_guard<std::mutex> l(mu_);
  auto r = store_->GetJob(o.job);
  if (!r.ok() || store::IsTerminal(r->state)) return;
  if (o.restarts > r->restart_count) {  // the backend ran the job again (a Slurm requeue)
    const int32_t more = o.restarts - r->restart_count;
    if (r->state == v1::PENDING) AdvanceToRunningLocked(o.job, o.message);
    auto u = store_->Update(
        o.job,
        [&](store::JobRecord& j) {
          j.state = v1::RESTARTING;
          j.restart_count = o.restarts;
        },
        absl::StrCat("restarted by ", placement_->name(), " (restart ", o.restarts, ")"));
    if (u.ok() && m_restarts_) m_restarts_->With({}).Inc(more);
  }
  switch (o.state) {
    case v1::PENDING:
      if (r->state == v1::PENDING && o.wait_reason != live_[o.job].last_wait_reason &&
          store_->SetWaitReasons({{o.job, o.wait_reason}}).ok()) {
        live_[o.job].last_wait_reason = o.wait_reason;
      }
      break;
    case v1::SUCCEEDED:
    case v1::RUNNING:
      if (!AdvanceToRunningLocked(o.job, o.message)) break;
      if (o.current_step > r->current_step) {
        if (m_steps_)
          m_steps_->With({}).Inc(static_cast<double>(o.current_step - std::max<int64_t>(0, r->current_step)));
        (void)store_->UpdateProgress(o.job, o.current_step, /*checkpoint_step=*/-1);
      }
      if (o.state == v1::SUCCEEDED)
        FinishLocked(
            o.job, [](store::JobRecord& j) { j.state = v1::SUCCEEDED; }, o.message);
      break;
    case v1::FAILED:
    case v1::CANCELLED:
      FinishLocked(
          o.job,
          [&](store::JobRecord& j) {
            j.state = o.state;
            j.wait_reason.clear();
            if (o.state != v1::FAILED) return;
            j.exit_codes.assign(std::max(1, j.world_size), kExitUnknown);
            j.exit_codes[0] = o.exit_code;
            j.root_cause = o.root_cause;
          },
          o.message);
      break;
    default:
      break;
  }
  NotifyLocked();
}

}  // namespace loom::runtime::service
