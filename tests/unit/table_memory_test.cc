// The memory tables really occupy, read from the process's resident set
// (/proc/self/status VmRSS): cached tables cost about the bytes the cache
// budget counts for them, evicted tables give their memory back, and large
// arrays keep their 2 MiB alignment (huge pages for the build).
//
// Found by the soak (bench/soak.sh): with every array rounded up to a 2 MiB
// huge page, 100 cached GetTable tables of 128 KiB each held 424 MiB
// resident, and a 64 MiB cache under churn held about 1 GiB.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/unit/test_util.h"
#include "core/engine/rope_table.h"
#include "core/engine/table_cache.h"

namespace rope {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// ASan keeps freed heap blocks resident (its quarantine) and adds shadow
// pages, so the resident set says nothing about the tables there.
#define SKIP_UNDER_ASAN()                                                        \
  if (kAddressSanitizer) GTEST_SKIP() << "resident-set bounds are meaningless " \
                                         "under AddressSanitizer (quarantine)"

constexpr int64_t kMiB = int64_t{1} << 20;
// Memory the test's own bookkeeping, the allocator and (under ASan) shadow
// pages may add on top of the tables.
constexpr int64_t kSlack = 8 * kMiB;

// VmRSS of this process in bytes; -1 when /proc cannot be read.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kb = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb * 1024;
  }
  return -1;
}

using test::PlainTableKey;

TEST(TableMemoryTest, CachedTablesOccupyAboutTheirAccountedBytes) {
  SKIP_UNDER_ASAN();
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0) << "cannot read VmRSS from /proc/self/status";
  TableCache cache(256 * kMiB);
  std::vector<std::shared_ptr<const RopeTable>> held;
  int64_t accounted = 0;
  // GetTable-like (64 KiB arrays) and scores-like (256 KiB arrays) tables:
  // each array once sat on a whole 2 MiB page.
  for (int i = 0; i < 64; ++i) {
    const TableKey key = i % 2 == 0 ? PlainTableKey(10000 + i, 32, 1024) : PlainTableKey(10000 + i, 64, 2048);
    absl::StatusOr<std::shared_ptr<const RopeTable>> table = cache.Get(key);
    ASSERT_TRUE(table.ok()) << table.status();
    accounted += (*table)->byte_size();
    held.push_back(*std::move(table));
  }
  EXPECT_EQ(cache.stats().bytes, accounted);
  const int64_t grown = ResidentBytes() - before;
  EXPECT_LE(grown, accounted + kSlack)
      << "64 tables accounted as " << accounted / kMiB << " MiB made the process grow by "
      << grown / kMiB << " MiB";
}

TEST(TableMemoryTest, EvictedTablesGiveTheirMemoryBack) {
  SKIP_UNDER_ASAN();
  const int64_t budget = 16 * kMiB;
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0) << "cannot read VmRSS from /proc/self/status";
  {
    TableCache cache(budget);
    // 200 distinct prefill-like tables (1 MiB arrays), each evicted soon
    // after it is built, between short-lived request-sized heap buffers.
    for (int i = 0; i < 200; ++i) {
      auto request = std::make_unique<std::vector<char>>(4 * kMiB + i * 4096, 'x');
      absl::StatusOr<std::shared_ptr<const RopeTable>> table =
          cache.Get(PlainTableKey(500000 + i, 128, 4096));
      ASSERT_TRUE(table.ok()) << table.status();
      EXPECT_LE(cache.stats().bytes, budget);
    }
    EXPECT_EQ(cache.stats().evictions, 200 - 8);  // 2 MiB tables, 8 fit
    const int64_t grown = ResidentBytes() - before;
    EXPECT_LE(grown, budget + kSlack)
        << "a " << budget / kMiB << " MiB cache after 200 builds made the process grow by "
        << grown / kMiB << " MiB";
  }
  const int64_t after_cache = ResidentBytes() - before;
  EXPECT_LE(after_cache, kSlack) << "with the cache gone the process is still "
                                 << after_cache / kMiB << " MiB larger";
}

TEST(TableMemoryTest, LargeArraysStartOnA2MiBBoundary) {
  // 4096 rows x 256 floats x 4 bytes = 4 MiB per array; and an odd size.
  // A table of 4100 rows is a full block and a block of 4 rows (a small
  // array, from the heap).
  for (const TableKey& key : {PlainTableKey(10000, 512, 4096), PlainTableKey(10000, 512, 4100)}) {
    std::shared_ptr<const RopeTable> table = RopeTable::Build(key);
    const TableBlock& first = *table->block(0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first.cos()) % (2 * kMiB), 0u) << key.max_len;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first.sin()) % (2 * kMiB), 0u) << key.max_len;
    // Every row is written, the last one included.
    const float* last = table->cos_row(key.max_len - 1);
    EXPECT_GE(last[0], -1.0f);
    EXPECT_LE(last[0], 1.0f);
  }
}

TEST(TableMemoryTest, A2MiBBlockIsOneHugePageOfCosThenSin) {
  // rotary_dim 128: 4096 rows x 64 floats, 1 MiB of cos and 1 MiB of sin,
  // together exactly one 2 MiB page (one fault to build, not 512).
  std::shared_ptr<const RopeTable> table = RopeTable::Build(PlainTableKey(500000, 128, 8192));
  for (int64_t slot = 0; slot < 2; ++slot) {
    const TableBlock& block = *table->block(slot);
    EXPECT_EQ(block.byte_size(), 2 * kMiB);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block.cos()) % (2 * kMiB), 0u) << slot;
    EXPECT_EQ(block.sin(), block.cos() + 4096 * 64) << slot;
  }
  // Rows are where the view says, in both halves of the page.
  EXPECT_EQ(table->sin_row(4096 + 7), table->block(1)->sin() + 7 * 64);
  EXPECT_EQ(table->cos_row(4095), table->block(0)->cos() + 4095 * 64);
}

TEST(TableMemoryTest, SinStartsOn64BytesWhateverTheRowCount) {
  // 7 rows x 3 values: sin starts at float 32 (21 rounded up to 16 floats).
  std::shared_ptr<const RopeTable> table = RopeTable::Build(PlainTableKey(10000, 6, 7));
  const TableBlock& block = *table->block(0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block.cos()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block.sin()) % 64, 0u);
  EXPECT_EQ(block.sin(), block.cos() + 32);
  EXPECT_EQ(block.byte_size(), 7 * 3 * 2 * 4);
}

}  // namespace
}  // namespace rope
