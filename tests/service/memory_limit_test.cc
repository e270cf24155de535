// server/service/memory_limit.h: the cgroup memory limit (v2 and v1, over a
// fake cgroup tree) and the default in-flight budget derived from it.
#include "server/service/memory_limit.h"


#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/service/fake_cgroup_tree.h"

namespace rope {
namespace {


TEST_F(FakeCgroupTree, ReadsTheV2LimitOfTheProcesssCgroup) {
  Write("pod/ctr/memory.max", "3221225472\n");
  std::optional<MemoryLimit> limit = CgroupMemoryLimit("0::/pod/ctr\n", root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, int64_t{3} << 30);
  EXPECT_NE(limit->source.find("cgroup v2"), std::string::npos) << limit->source;
}

TEST_F(FakeCgroupTree, TakesTheTightestV2LimitOfTheCgroupAndItsAncestors) {
  Write("pod/memory.max", "1073741824\n");
  Write("pod/ctr/memory.max", "max\n");
  std::optional<MemoryLimit> limit = CgroupMemoryLimit("0::/pod/ctr\n", root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, int64_t{1} << 30);
  EXPECT_NE(limit->source.find("/pod/memory.max"), std::string::npos) << limit->source;
}

TEST_F(FakeCgroupTree, ReadsTheContainersOwnRootWhenItsPathIsNotMounted) {
  Write("memory.max", "536870912\n");
  std::optional<MemoryLimit> limit = CgroupMemoryLimit("0::/kubepods/pod1/ctr\n", root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, int64_t{512} << 20);
}

TEST_F(FakeCgroupTree, ReadsV1MemoryLimitInBytesAndIgnoresItsNoLimitValue) {
  Write("memory/libpod_parent/ctr/memory.limit_in_bytes", "3221225472\n");
  Write("memory/memory.limit_in_bytes", "9223372036854771712\n");
  std::optional<MemoryLimit> limit =
      CgroupMemoryLimit("4:memory:/libpod_parent/ctr\n1:cpu,cpuacct:/\n", root());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, int64_t{3} << 30);
  EXPECT_NE(limit->source.find("cgroup v1"), std::string::npos) << limit->source;
}

TEST_F(FakeCgroupTree, NoLimitAnywhereIsNone) {
  Write("memory.max", "max\n");
  Write("memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_FALSE(CgroupMemoryLimit("4:memory:/\n0::/\n", root()).has_value());
  EXPECT_FALSE(CgroupMemoryLimit("", root()).has_value());
}

TEST(DefaultInflightBytesTest, IsTheLimitLessTheTableCacheAndTheMargin) {
  // 4 GiB pod, 256 MiB table cache: margin max(256 MiB, 512 MiB) = 512 MiB.
  EXPECT_EQ(DefaultInflightBytes(int64_t{4} << 30, int64_t{256} << 20), int64_t{3328} << 20);
  EXPECT_EQ(MemoryMargin(int64_t{1} << 30), int64_t{256} << 20);
}

TEST(DefaultInflightBytesTest, NeverFallsBelowTheFloor) {
  EXPECT_EQ(DefaultInflightBytes(int64_t{512} << 20, int64_t{1} << 30),
            kMinDefaultInflightBytes);
}

TEST(ProcessMemoryLimitTest, IsPositiveAndSaysWhereItCameFrom) {
  const MemoryLimit limit = ProcessMemoryLimit();
  EXPECT_GT(limit.bytes, 0);
  EXPECT_FALSE(limit.source.empty());
}

}  // namespace
}  // namespace rope
