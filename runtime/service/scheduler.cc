#include "runtime/service/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace loom::runtime::service {

int32_t Scheduler::Agent::FreeCpu() const {
  int32_t used = 0;
  for (const auto& [job, n] : cpu_used) used += n;
  return cpu_slots - used;
}

int32_t Scheduler::Agent::FreeGpu() const {
  return static_cast<int32_t>(std::count(gpu_owner.begin(), gpu_owner.end(), 0));
}

int64_t Scheduler::Agent::Capacity(const Demand& d, bool free) const {
  if (!d.gpu) return free ? FreeCpu() : cpu_slots;
  const int64_t gpus = free ? FreeGpu() : static_cast<int64_t>(gpu_owner.size());
  return gpus * std::max(1, d.ranks_per_gpu);
}

void Scheduler::UpsertAgent(const std::string& id, int32_t cpu_slots, int32_t gpus, int64_t memory_bytes) {
  Agent& a = agents_[id];
  a.cpu_slots = std::max(0, cpu_slots);
  a.memory_bytes = std::max<int64_t>(0, memory_bytes);
  gpus = std::max(0, gpus);
  if (static_cast<int32_t>(a.gpu_owner.size()) < gpus) a.gpu_owner.resize(gpus, 0);
  // Shrinking keeps GPUs that are in use until released.
  while (static_cast<int32_t>(a.gpu_owner.size()) > gpus && a.gpu_owner.back() == 0) a.gpu_owner.pop_back();
}

std::vector<int64_t> Scheduler::RemoveAgent(const std::string& id) {
  std::vector<int64_t> affected;
  auto it = agents_.find(id);
  if (it == agents_.end()) return affected;
  for (const auto& [job, slots] : placements_) {
    for (const Slot& s : slots) {
      if (s.agent_id == id) {
        affected.push_back(job);
        break;
      }
    }
  }
  agents_.erase(it);
  for (int64_t job : affected) Release(job);
  return affected;
}

int64_t Scheduler::TotalCapacity(bool gpu) const {
  int64_t n = 0;
  for (const auto& [id, a] : agents_) n += gpu ? static_cast<int64_t>(a.gpu_owner.size()) : a.cpu_slots;
  return n;
}

int64_t Scheduler::TotalCapacity(const Demand& d) const {
  int64_t n = 0;
  for (const auto& [id, a] : agents_)
    if (a.Holds(d)) n += a.Capacity(d, false);
  return n;
}

int64_t Scheduler::FreeCapacity(const Demand& d) const {
  int64_t n = 0;
  for (const auto& [id, a] : agents_)
    if (a.Holds(d)) n += a.Capacity(d, true);
  return n;
}

int64_t Scheduler::LargestAgentMemory() const {
  int64_t most = 0;
  for (const auto& [id, a] : agents_) most = std::max(most, a.memory_bytes);
  return most;
}

int64_t Scheduler::FreeCapacity(bool gpu) const {
  int64_t n = 0;
  for (const auto& [id, a] : agents_) n += gpu ? a.FreeGpu() : a.FreeCpu();
  return n;
}

void Scheduler::Enqueue(int64_t job_id, int32_t priority, int64_t seq, const Demand& d) {
  Dequeue(job_id);
  Entry e{job_id, priority, seq, d};
  auto pos = std::upper_bound(queue_.begin(), queue_.end(), e, [](const Entry& a, const Entry& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.seq < b.seq;
  });
  queue_.insert(pos, e);
}

bool Scheduler::Dequeue(int64_t job_id) {
  auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Entry& e) { return e.job_id == job_id; });
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

bool Scheduler::queued(int64_t job_id) const {
  return std::any_of(queue_.begin(), queue_.end(), [&](const Entry& e) { return e.job_id == job_id; });
}

std::optional<std::vector<Slot>> Scheduler::TryPlace(int64_t job_id, const Demand& d) {
  if (d.ranks <= 0 || d.ranks > FreeCapacity(d)) return std::nullopt;
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [id, a] : agents_)
    if (a.Holds(d)) order.push_back({a.Capacity(d, true), id});
  std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  std::vector<Slot> slots;
  int32_t rank = 0;
  for (const auto& [free, id] : order) {
    if (rank == d.ranks) break;
    Agent& a = agents_[id];
    int32_t take = static_cast<int32_t>(std::min<int64_t>(free, d.ranks - rank));
    if (take <= 0) continue;
    if (d.gpu) {
      const int32_t per_gpu = std::max(1, d.ranks_per_gpu);
      for (int32_t g = 0; g < static_cast<int32_t>(a.gpu_owner.size()) && take > 0; ++g) {
        if (a.gpu_owner[g] != 0) continue;
        a.gpu_owner[g] = job_id;
        for (int32_t k = 0; k < per_gpu && take > 0; ++k, --take) slots.push_back({rank++, id, g});
      }
    } else {
      a.cpu_used[job_id] += take;
      for (; take > 0; --take) slots.push_back({rank++, id, -1});
    }
  }
  placements_[job_id] = slots;
  return slots;
}

std::string Scheduler::DescribeShortage(const Demand& d) const {
  if (d.gpu && d.ranks_per_gpu > 1) {
    const int64_t gpus = (d.ranks + d.ranks_per_gpu - 1) / d.ranks_per_gpu;
    return absl::StrCat("needs ", gpus, " GPUs (", d.ranks, " ranks, ", d.ranks_per_gpu, " per GPU); ",
                        FreeCapacity(d) / d.ranks_per_gpu, " free of ", TotalCapacity(d) / d.ranks_per_gpu, " on ",
                        agents_.size(), " agent(s)");
  }
  const char* what = d.gpu ? "GPUs" : "CPU slots";
  std::string memory;  // when memory keeps some agents out
  if (!d.gpu && d.bytes_per_rank > 0 && TotalCapacity(d) < TotalCapacity(d.gpu))
    memory = absl::StrCat(" of ", (d.bytes_per_rank + (1 << 20) - 1) >> 20, " MiB each");
  return absl::StrCat("needs ", d.ranks, " ", what, memory, "; ", FreeCapacity(d), " free of ", TotalCapacity(d),
                      " on ", agents_.size(), " agent(s)");
}

std::vector<Decision> Scheduler::Schedule() {
  std::vector<Decision> out;
  std::vector<Entry> keep;
  const Entry* blocker = nullptr;
  for (const Entry& e : queue_) {
    Decision d;
    d.job_id = e.job_id;
    if (!FitsCluster(e.demand)) {
      d.wait_reason = absl::StrCat("larger than the cluster: ", DescribeShortage(e.demand), "; waiting for capacity");
      keep.push_back(e);
    } else if (blocker != nullptr) {
      d.wait_reason = absl::StrCat("queued behind job-", blocker->job_id, " (priority ", blocker->priority, ")");
      keep.push_back(e);
    } else if (auto slots = TryPlace(e.job_id, e.demand)) {
      d.placed = true;
      d.placement = std::move(*slots);
    } else {
      d.wait_reason = absl::StrCat("waiting for resources: ", DescribeShortage(e.demand));
      keep.push_back(e);
      blocker = &e;
    }
    out.push_back(std::move(d));
  }
  queue_ = std::move(keep);
  return out;
}

std::optional<std::vector<Slot>> Scheduler::PlaceNow(int64_t job_id, const Demand& d) {
  Release(job_id);
  return TryPlace(job_id, d);
}

bool Scheduler::Adopt(int64_t job_id, const std::string& agent_id, const std::vector<Slot>& slots, bool gpu) {
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || slots.empty()) return false;
  Agent& a = it->second;
  if (gpu) {
    for (const Slot& s : slots) {
      if (s.gpu < 0 || s.gpu >= static_cast<int32_t>(a.gpu_owner.size())) return false;
      if (a.gpu_owner[s.gpu] != 0 && a.gpu_owner[s.gpu] != job_id) return false;
    }
    for (const Slot& s : slots) a.gpu_owner[s.gpu] = job_id;
  } else {
    if (a.FreeCpu() < static_cast<int32_t>(slots.size())) return false;
    a.cpu_used[job_id] += static_cast<int32_t>(slots.size());
  }
  auto& p = placements_[job_id];
  for (Slot s : slots) {
    s.agent_id = agent_id;
    p.push_back(s);
  }
  std::sort(p.begin(), p.end(), [](const Slot& x, const Slot& y) { return x.rank < y.rank; });
  return true;
}

void Scheduler::Release(int64_t job_id) {
  placements_.erase(job_id);
  for (auto& [id, a] : agents_) {
    a.cpu_used.erase(job_id);
    for (int64_t& owner : a.gpu_owner) {
      if (owner == job_id) owner = 0;
    }
  }
}

const std::vector<Slot>* Scheduler::Placement(int64_t job_id) const {
  auto it = placements_.find(job_id);
  return it == placements_.end() ? nullptr : &it->second;
}

}  // namespace loom::runtime::service
