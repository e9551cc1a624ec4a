// How many CPUs this process can use: the CPUs of its affinity mask (which
// taskset and cgroup cpusets narrow), further capped by a cgroup CPU quota
// (a container's CPU limit: Kubernetes `resources.limits.cpu`, `docker run
// --cpus`), rounded up. Both cgroup versions are read, v2's cpu.max and v1's
// cpu.cfs_quota_us / cpu.cfs_period_us, under /sys/fs/cgroup, the view a
// container has of its own cgroup.
#pragma once

#include <string>

namespace loom {

// At least 1.
int UsableCpus();

// The CPU quota under the cgroup file system mounted at `root`, in whole
// CPUs rounded up (a quota of 1.5 CPUs is 2); 0 when no quota is set or
// none can be read.
int CgroupCpuQuota(const std::string& root);

}  // namespace loom
