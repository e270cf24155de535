// server/service/cpu_limit.h: the cgroup CPU quota (v2 and v1, over a fake
// cgroup tree) and the process's usable CPUs.
#include "server/service/cpu_limit.h"

#include <sched.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/service/fake_cgroup_tree.h"

namespace rope {
namespace {

// The same fake mount, its tests under their own suite name.
class FakeCpuCgroupTree : public FakeCgroupTree {};

TEST_F(FakeCpuCgroupTree, ReadsTheV2QuotaRoundedUpToWholeCpus) {
  Write("pod/ctr/cpu.max", "150000 100000\n");  // limits.cpu: 1500m
  std::optional<CpuLimit> limit = CgroupCpuLimit("0::/pod/ctr\n", root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->cpus, 2);
  EXPECT_NE(limit->source.find("cgroup v2"), std::string::npos) << limit->source;
  EXPECT_NE(limit->source.find("150000 100000"), std::string::npos) << limit->source;
}

TEST_F(FakeCpuCgroupTree, TakesTheTightestV2QuotaOfTheCgroupAndItsAncestors) {
  Write("pod/cpu.max", "400000 100000\n");
  Write("pod/ctr/cpu.max", "max 100000\n");
  Write("cpu.max", "max 100000\n");
  std::optional<CpuLimit> limit = CgroupCpuLimit("0::/pod/ctr\n", root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->cpus, 4);
  EXPECT_NE(limit->source.find("/pod/cpu.max"), std::string::npos) << limit->source;
}

TEST_F(FakeCpuCgroupTree, ReadsTheContainersOwnRootWhenItsPathIsNotMounted) {
  Write("cpu.max", "200000 100000\n");
  std::optional<CpuLimit> limit = CgroupCpuLimit("0::/kubepods/pod1/ctr\n", root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->cpus, 2);
}

TEST_F(FakeCpuCgroupTree, ReadsV1QuotaAndPeriodAndIgnoresMinusOne) {
  const std::string cgroup = "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n";
  Write("cpu/docker/abc/cpu.cfs_quota_us", "-1\n");
  Write("cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_FALSE(CgroupCpuLimit(cgroup, root()).has_value());
  Write("cpu/docker/abc/cpu.cfs_quota_us", "50000\n");  // half a CPU
  std::optional<CpuLimit> limit = CgroupCpuLimit(cgroup, root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->cpus, 1);
  EXPECT_NE(limit->source.find("cgroup v1"), std::string::npos) << limit->source;
}

TEST_F(FakeCpuCgroupTree, NoQuotaAnywhereOrAMalformedFileIsNone) {
  EXPECT_FALSE(CgroupCpuLimit("0::/a\n", root()).has_value());
  Write("a/cpu.max", "max 100000\n");
  EXPECT_FALSE(CgroupCpuLimit("0::/a\n", root()).has_value());
  Write("a/cpu.max", "lots\n");
  EXPECT_FALSE(CgroupCpuLimit("0::/a\n", root()).has_value());
  Write("a/cpu.max", "0 100000\n");
  EXPECT_FALSE(CgroupCpuLimit("0::/a\n", root()).has_value());
}

// The real process: never more than its affinity mask allows, at least 1.
TEST(ProcessCpuLimitTest, IsAtMostTheAffinityMaskAndAtLeastOne) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const CpuLimit limit = ProcessCpuLimit();
  EXPECT_GE(limit.cpus, 1);
  EXPECT_LE(limit.cpus, CPU_COUNT(&set)) << limit.source;
  EXPECT_FALSE(limit.source.empty());
}

}  // namespace
}  // namespace rope
