#include "base/usable_cpus.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>

namespace loom {
namespace {

// ceil(quota / period) for positive values, else 0.
int QuotaCpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>(std::min<long long>((quota + period - 1) / period, 1 << 20));
}

// cgroup v2: "<quota> <period>" or "max <period>".
int V2Quota(const std::string& root) {
  std::ifstream in(root + "/cpu.max");
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  try {
    return QuotaCpus(std::stoll(quota), period);
  } catch (...) {
    return 0;
  }
}

// cgroup v1: cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us, in the cpu
// controller's folder (mounted as cpu or as cpu,cpuacct).
int V1Quota(const std::string& root) {
  for (const char* dir : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
    std::ifstream q(root + dir + "/cpu.cfs_quota_us"), p(root + dir + "/cpu.cfs_period_us");
    long long quota = 0, period = 0;
    if (q >> quota && p >> period) return QuotaCpus(quota, period);
  }
  return 0;
}

}  // namespace

int CgroupCpuQuota(const std::string& root) {
  const int v2 = V2Quota(root);
  return v2 > 0 ? v2 : V1Quota(root);
}

int UsableCpus() {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  const int quota = CgroupCpuQuota("/sys/fs/cgroup");
  return quota > 0 ? std::min(cpus, quota) : cpus;
}

}  // namespace loom
