// ChooseMallocSettings over fake environments, and ApplyMallocSettings for
// real in this process (glibc's mallinfo2 shows where a large block comes
// from). The ropeserve log line is checked by rope_service_process_test.
#include "server/service/malloc_settings.h"

#include <malloc.h>

#include <cstdlib>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace rope {
namespace {

// An environment of the given variables only.
EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(MallocSettingsTest, ArenasAreAQuarterOfTheCpusBetweenTwoAndEight) {
  EXPECT_EQ(ChooseMallocSettings(1, FakeEnv({})).arena_max, 2);
  EXPECT_EQ(ChooseMallocSettings(8, FakeEnv({})).arena_max, 2);
  EXPECT_EQ(ChooseMallocSettings(16, FakeEnv({})).arena_max, 4);
  EXPECT_EQ(ChooseMallocSettings(33, FakeEnv({})).arena_max, 8);
  EXPECT_EQ(ChooseMallocSettings(256, FakeEnv({})).arena_max, 8);
}

TEST(MallocSettingsTest, LargeBuffersComeFromTheHeapByDefault) {
  const MallocSettings settings = ChooseMallocSettings(2, FakeEnv({}));
  EXPECT_EQ(settings.mmap_threshold, 32 << 20);
  EXPECT_EQ(settings.trim_threshold, 64 << 20);
  const std::string text = DescribeMallocSettings(settings);
  EXPECT_NE(text.find("2 arenas"), std::string::npos) << text;
  EXPECT_NE(text.find("buffers up to 33554432 bytes from the heap, 67108864 bytes kept free"),
            std::string::npos)
      << text;
}

TEST(MallocSettingsTest, TheEnvironmentsArenaCapWins) {
  for (const auto& env : {FakeEnv({{"MALLOC_ARENA_MAX", "1"}}),
                          FakeEnv({{"GLIBC_TUNABLES", "glibc.malloc.arena_max=4"}})}) {
    const MallocSettings settings = ChooseMallocSettings(64, env);
    EXPECT_EQ(settings.arena_max, 0);
    EXPECT_EQ(settings.mmap_threshold, 32 << 20);  // the thresholds are still set
    EXPECT_NE(DescribeMallocSettings(settings).find("arenas as the environment sets them"),
              std::string::npos);
  }
}

TEST(MallocSettingsTest, EitherThresholdInTheEnvironmentLeavesBothToGlibc) {
  for (const auto& env :
       {FakeEnv({{"MALLOC_MMAP_THRESHOLD_", "131072"}}),
        FakeEnv({{"MALLOC_TRIM_THRESHOLD_", "0"}}),
        FakeEnv({{"GLIBC_TUNABLES", "glibc.malloc.tcache_count=0:glibc.malloc.trim_threshold=1"}}),
        FakeEnv({{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4096"}})}) {
    const MallocSettings settings = ChooseMallocSettings(4, env);
    EXPECT_EQ(settings.mmap_threshold, 0);
    EXPECT_EQ(settings.trim_threshold, 0);
    EXPECT_EQ(settings.arena_max, 2);
    EXPECT_NE(DescribeMallocSettings(settings).find("thresholds as the environment sets them"),
              std::string::npos);
  }
}

TEST(MallocSettingsTest, UnrelatedOrEmptyVariablesChangeNothing) {
  const MallocSettings settings = ChooseMallocSettings(
      4, FakeEnv({{"GLIBC_TUNABLES", "glibc.malloc.tcache_count=0"}, {"MALLOC_ARENA_MAX", ""}}));
  EXPECT_EQ(settings.arena_max, 2);
  EXPECT_EQ(settings.mmap_threshold, 32 << 20);
}

// The effect, in this process: a 20 MiB block comes from the heap (glibc's
// default would mmap it: it is far above the initial 128 KiB threshold) and
// stays there once freed, ready for the next call of that size.
TEST(MallocSettingsTest, AppliedAMessageSizedBlockComesFromTheHeapAndStays) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc (mallopt does nothing)";
#endif
  ASSERT_TRUE(ApplyMallocSettings(ChooseMallocSettings(2, FakeEnv({}))));
  constexpr size_t kBytes = size_t{20} << 20;
  const struct mallinfo2 before = mallinfo2();
  void* block = std::malloc(kBytes);
  ASSERT_NE(block, nullptr);
  static_cast<volatile char*>(block)[kBytes - 1] = 1;
  const struct mallinfo2 held = mallinfo2();
  EXPECT_EQ(held.hblkhd, before.hblkhd) << "the block was mmap'ed";
  EXPECT_GE(held.arena, before.arena + kBytes - (size_t{1} << 20));
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_GE(after.arena, held.arena) << "the heap was trimmed";
  EXPECT_GE(after.fordblks, kBytes) << "the freed block is not kept";
}

}  // namespace
}  // namespace rope
