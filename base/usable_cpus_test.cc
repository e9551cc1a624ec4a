// CgroupCpuQuota on planted cgroup trees (v2's cpu.max, v1's cfs files under
// either controller folder name), and UsableCpus against this process's own
// affinity mask.
#include "base/usable_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace loom {
namespace {

std::string Root(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/cgroup_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(CgroupCpuQuota, ReadsVersionTwoAndRoundsUp) {
  const std::string r = Root("v2");
  Write(r + "/cpu.max", "200000 100000\n");
  EXPECT_EQ(CgroupCpuQuota(r), 2);
  Write(r + "/cpu.max", "150000 100000\n");
  EXPECT_EQ(CgroupCpuQuota(r), 2);
  Write(r + "/cpu.max", "50000 100000\n");
  EXPECT_EQ(CgroupCpuQuota(r), 1);
  Write(r + "/cpu.max", "max 100000\n");
  EXPECT_EQ(CgroupCpuQuota(r), 0);
  Write(r + "/cpu.max", "garbage\n");
  EXPECT_EQ(CgroupCpuQuota(r), 0);
}

TEST(CgroupCpuQuota, ReadsVersionOneUnderEitherControllerName) {
  std::string r = Root("v1");
  Write(r + "/cpu/cpu.cfs_quota_us", "400000\n");
  Write(r + "/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupCpuQuota(r), 4);
  Write(r + "/cpu/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(CgroupCpuQuota(r), 0);
  r = Root("v1_joined");
  Write(r + "/cpu,cpuacct/cpu.cfs_quota_us", "250000\n");
  Write(r + "/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(CgroupCpuQuota(r), 3);
}

TEST(CgroupCpuQuota, NoFilesMeansNoQuota) { EXPECT_EQ(CgroupCpuQuota(Root("empty")), 0); }

TEST(UsableCpus, IsTheAffinityMaskCappedByTheQuota) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int mask = CPU_COUNT(&set), quota = CgroupCpuQuota("/sys/fs/cgroup");
  EXPECT_EQ(UsableCpus(), quota > 0 ? std::min(mask, quota) : mask);
  EXPECT_GE(UsableCpus(), 1);
}

}  // namespace
}  // namespace loom
