// Paged tables (core/engine/table_block.h, table_cache.h, the engine):
// blocks built on first touch, exact at far positions, bit-identical at block
// edges, held while a call uses them, built once under concurrent misses, and
// the per-call cap on distinct blocks.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/engine/rope_table.h"
#include "core/engine/table_block.h"
#include "core/engine/table_cache.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using ::absl::StatusCode;
using test::Decode;
using test::Encode;
using test::HostTensor;
using test::RandomValues;
using test::StatusIs;

constexpr double kTableTolerance = 1.2e-7;
constexpr int64_t kBlockRows = int64_t{1} << kMaxTableBlockShift;
constexpr uint32_t kMaxLen24 = uint32_t{1} << 24;

using test::PlainTableKey;

TEST(TableBlockTest, ShortTablesAreOneBlockAndLongOnesAreCutIn4096Rows) {
  EXPECT_EQ(kBlockRows, 4096);
  const TableKey small = PlainTableKey(10000, 64, 100);
  EXPECT_EQ(TableBlockShift(small), 7);
  EXPECT_EQ(TableBlockCount(small), 1);
  EXPECT_EQ(TableBlockRows(small, 0), 100);
  EXPECT_EQ(TableBlockBytes(small, 0), 100 * 32 * 2 * 4);

  const TableKey one_more = PlainTableKey(10000, 64, 4097);
  EXPECT_EQ(TableBlockShift(one_more), 12);
  EXPECT_EQ(TableBlockCount(one_more), 2);
  EXPECT_EQ(TableBlockRows(one_more, 1), 1);
  EXPECT_EQ(TableBytes(one_more), TableBlockBytes(one_more, 0) + TableBlockBytes(one_more, 1));

  const TableKey longest = PlainTableKey(500000, 128, kMaxLen24);
  EXPECT_EQ(TableBlockCount(longest), 4096);
  EXPECT_EQ(TableBlockRows(longest, 4095), 4096);
  EXPECT_EQ(TableBytes(longest), int64_t{kMaxLen24} * 64 * 2 * 4);  // 8 GiB, never built whole
}

// The blocks holding 2^20, 10,485,759 (Llama 4 Scout's last position) and
// 2^24 - 1 (the cap's last row), every row of each against long double.
TEST(TableBlockTest, FarBlocksAreWithinFloat32RoundingOfTheExactValues) {
  for (int rotary_dim : {128, 64}) {
    const TableKey key = PlainTableKey(500000, rotary_dim, kMaxLen24);
    for (int64_t pos : {int64_t{1} << 20, int64_t{10485759}, (int64_t{1} << 24) - 1}) {
      const int64_t block = pos >> kMaxTableBlockShift;
      const std::shared_ptr<const TableBlock> built = TableBlock::Build(key, block);
      ASSERT_EQ(built->first_row(), block * kBlockRows);
      ASSERT_LE(built->first_row(), pos);
      ASSERT_LT(pos, built->first_row() + built->rows());
      const reference::MaxError err = reference::CompareRows(
          500000, rotary_dim, 1.0L, built->first_row(), built->rows(), built->cos(), built->sin());
      EXPECT_LE(err.value, kTableTolerance)
          << "rotary_dim " << rotary_dim << " block of " << pos << ": at position " << err.pos
          << ", pair " << err.index;
    }
  }
}

// Rows on both sides of each block edge are the rows of one fill from row 0
// (the recurrence re-anchors every 1024 rows, and blocks start on 4096).
TEST(TableBlockTest, RowsAtBlockEdgesAreThoseOfATableFilledWhole) {
  const TableKey key = PlainTableKey(10000, 32, 3 * 4096 + 5);
  const std::vector<double> inv_freq = ComputeInvFreq(key);
  std::vector<float> cos(key.max_len * 16), sin(key.max_len * 16);
  FillTableRows(inv_freq, 1.0, 0, key.max_len, cos.data(), sin.data());
  TableCache cache(64 << 20);
  absl::StatusOr<std::shared_ptr<const RopeTable>> view = cache.Get(key, {1, 3});
  ASSERT_TRUE(view.ok()) << view.status();
  for (int64_t pos : {4096, 4097, 8190, 8191, 12288, 12289, 12292}) {
    ASSERT_TRUE((*view)->HoldsRows(pos, 1)) << pos;
    EXPECT_EQ(std::memcmp((*view)->cos_row(pos), &cos[pos * 16], 16 * sizeof(float)), 0) << pos;
    EXPECT_EQ(std::memcmp((*view)->sin_row(pos), &sin[pos * 16], 16 * sizeof(float)), 0) << pos;
  }
  EXPECT_FALSE((*view)->HoldsRows(4095, 1));  // block 0: not asked for
  EXPECT_FALSE((*view)->HoldsRows(8192, 1));  // block 2: not asked for
  EXPECT_EQ((*view)->byte_size(), TableBlockBytes(key, 1) + TableBlockBytes(key, 3));
}

TEST(PagedCacheTest, AViewBuildsAndHoldsOnlyTheBlocksItTouches) {
  TableCache cache(64 << 20);
  const TableKey key = PlainTableKey(500000, 128, 10485760);
  absl::StatusOr<std::shared_ptr<const RopeTable>> view = cache.Get(key, {10000000 >> 12});
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE((*view)->HoldsRows(10000000, 1));
  EXPECT_FALSE((*view)->HoldsRows(0, 1));
  const TableCacheStats s = cache.stats();
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.built, 1);
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.bytes, 4096 * 64 * 2 * 4);
}

TEST(PagedCacheTest, BlocksAViewHoldsAreNotEvictedAndStayReadable) {
  const TableKey key = PlainTableKey(10000, 16, 3 * 4096);
  TableCache cache(/*budget_bytes=*/2 * TableBlockBytes(key, 0));  // room for two blocks
  absl::StatusOr<std::shared_ptr<const RopeTable>> held = cache.Get(key, {0});
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(cache.Get(key, {1}).ok());
  // Block 0 is held: block 1 (held by no one) makes room for block 2.
  ASSERT_TRUE(cache.Get(key, {2}).ok());
  const TableCacheStats s = cache.stats();
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.entries, 2);
  EXPECT_LE(s.bytes, s.budget_bytes);
  // The held block is still the cache's: asking for it again is a hit.
  const int64_t hits = s.hits;
  ASSERT_TRUE(cache.Get(key, {0}).ok());
  EXPECT_EQ(cache.stats().hits, hits + 1);
  const reference::MaxError err = reference::CompareRows(
      10000, 16, 1.0L, 0, 4096, (*held)->block(0)->cos(), (*held)->block(0)->sin());
  EXPECT_LE(err.value, kTableTolerance) << "at position " << err.pos;
}

TEST(PagedCacheTest, ConcurrentCallsBuildEachMissingBlockOnce) {
  constexpr int kThreads = 8;
  const TableKey key = PlainTableKey(10000, 16, 10 * 4096);
  std::atomic<int> builds{0};
  absl::Notification release;
  TableCache cache(64 << 20, [&](const TableKey& k, int64_t block) {
    builds.fetch_add(1);
    // Hold every build so that the other threads pile up on the same blocks.
    release.WaitForNotificationWithTimeout(absl::Milliseconds(200));
    return TableBlock::Build(k, block);
  });
  std::vector<std::shared_ptr<const RopeTable>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Overlapping sets: blocks 3..5 and 4..6.
      const std::vector<int64_t> blocks =
          t % 2 == 0 ? std::vector<int64_t>{3, 4, 5} : std::vector<int64_t>{4, 5, 6};
      absl::StatusOr<std::shared_ptr<const RopeTable>> view = cache.Get(key, blocks);
      EXPECT_TRUE(view.ok()) << view.status();
      if (view.ok()) got[t] = *std::move(view);
    });
  }
  release.Notify();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(builds.load(), 4);  // blocks 3, 4, 5, 6
  EXPECT_EQ(cache.stats().entries, 4);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_NE(got[t], nullptr);
    EXPECT_EQ(got[t]->block(1), got[0]->block(t % 2 == 0 ? 1 : 2)) << "thread " << t;  // block 4
  }
}

TEST(PagedCacheTest, BlocksTogetherLargerThanTheBudgetAreResourceExhausted) {
  const TableKey key = PlainTableKey(10000, 16, 4 * 4096);
  TableCache cache(/*budget_bytes=*/2 * TableBlockBytes(key, 0));
  EXPECT_TRUE(cache.Get(key, {0, 3}).ok());
  EXPECT_TRUE(StatusIs(cache.Get(key, {0, 1, 2}).status(), StatusCode::kResourceExhausted,
                       "the 3 blocks of rows this call touches need 786432 bytes"));
}

// ---- Through the engine ---------------------------------------------------------

class PagedEngineTest : public ::testing::Test {
 protected:
  static constexpr int64_t kHeads = 4, kDim = 128;

  void MakeEngine(int64_t max_blocks_per_call) {
    auto backend = NewCpuBackend(2);
    ASSERT_TRUE(backend.ok()) << backend.status();
    EngineLimits limits;  // max_len_cap: 2^24 by default
    limits.table_cache_bytes = 256 << 20;
    limits.max_table_blocks_per_call = max_blocks_per_call;
    engine_ = std::make_unique<Engine>(std::move(backend).value(), limits);
  }

  // Llama 4 Scout's plain RoPE part: theta 500000, head_dim 128, 10M positions.
  static RopeConfig LongConfig() {
    RopeConfig config;
    config.theta = 500000;
    config.head_dim = kDim;
    config.max_len = 10485760;
    config.layout = Layout::kHalf;
    return config;
  }

  // Rotates q [1, S, kHeads, kDim] at `positions` and checks every value
  // against the double-precision reference.
  void RotateAndCheck(const std::vector<int64_t>& positions, int64_t start_pos) {
    const int64_t seq = positions.empty() ? 1 : static_cast<int64_t>(positions.size());
    std::mt19937 rng(7);
    const std::vector<double> values = RandomValues(DType::kFloat32, seq * kHeads * kDim, &rng);
    HostTensor q = Encode(DType::kFloat32, {1, seq, kHeads, kDim}, values);
    RotateParams params;
    params.config = LongConfig();
    params.q = q.view();
    params.positions = positions;
    params.start_pos = start_pos;
    ASSERT_TRUE(engine_->Rotate(params).ok()) << engine_->Rotate(params);
    std::vector<int64_t> resolved = positions;
    if (resolved.empty()) resolved = {start_pos};
    reference::Rope rope;
    rope.theta = 500000;
    rope.head_dim = kDim;
    rope.rotary_dim = kDim;
    rope.interleaved = false;
    std::vector<double> want = values;
    reference::RotateTensor(rope, 1, seq, kHeads, resolved, false, &want);
    const std::vector<double> got = Decode(q);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-5) << "element " << i;
    }
  }

  std::unique_ptr<Engine> engine_;
};

TEST_F(PagedEngineTest, ColdDecodeAt10MillionBuildsOneBlock) {
  MakeEngine(256);
  RotateAndCheck({}, 10000000);
  const TableCacheStats s = engine_->cache_stats();
  EXPECT_EQ(s.built, 1);
  EXPECT_EQ(s.bytes, 4096 * 64 * 2 * 4);  // 2 MiB, not the table's 5 GiB
  RotateAndCheck({}, 10000001);  // warm: the same block
  EXPECT_EQ(engine_->cache_stats().built, 1);
  EXPECT_EQ(engine_->cache_stats().hits, 1);
}

TEST_F(PagedEngineTest, ScatteredExplicitPositionsUseTheirBlocksOnly) {
  MakeEngine(256);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < 40; ++i) positions.push_back(10485759 - i * 262139);  // 40 blocks
  RotateAndCheck(positions, 0);
  EXPECT_EQ(engine_->cache_stats().built, 40);
}

TEST_F(PagedEngineTest, PositionsOverMoreBlocksThanTheCapAreResourceExhausted) {
  MakeEngine(8);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < 9; ++i) positions.push_back(i * 4096 * 100);
  HostTensor q = Encode(DType::kFloat32, {1, 9, kHeads, kDim},
                        std::vector<double>(9 * kHeads * kDim, 0.5));
  const HostTensor before = q;
  RotateParams params;
  params.config = LongConfig();
  params.q = q.view();
  params.positions = positions;
  EXPECT_TRUE(StatusIs(engine_->Rotate(params), StatusCode::kResourceExhausted,
                       "the positions touch more than 8 blocks of 4096 table rows: over the "
                       "server's max_table_blocks_per_call limit of 8"));
  EXPECT_EQ(q.bytes, before.bytes);
  EXPECT_EQ(engine_->cache_stats().built, 0);
  positions.back() = positions.front() + 1;  // 8 blocks: accepted
  params.positions = positions;
  params.q = q.view();
  EXPECT_TRUE(engine_->Rotate(params).ok());
}

TEST_F(PagedEngineTest, GetTableAndAttentionBuildTheBlocksOfTheirRows) {
  MakeEngine(256);
  absl::StatusOr<TableSlice> slice = engine_->GetTable(LongConfig(), 10485760 - 10, 10);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(engine_->cache_stats().built, 1);
  const reference::MaxError err = reference::CompareRows(
      500000, 128, 1.0L, 10485750, 1, slice->table->cos_row(10485750),
      slice->table->sin_row(10485750));
  EXPECT_LE(err.value, kTableTolerance);

  // q at 8,000,000 .. 8,000,003, k at 4094 .. 4097: three blocks.
  HostTensor q = Encode(DType::kFloat32, {1, 4, kHeads, kDim},
                        std::vector<double>(4 * kHeads * kDim, 0.25));
  HostTensor k = Encode(DType::kFloat32, {1, 4, kHeads, kDim},
                        std::vector<double>(4 * kHeads * kDim, 0.5));
  AttentionParams params;
  params.config = LongConfig();
  params.q = q.const_view();
  params.k = k.const_view();
  params.q_start_pos = 8000000;
  params.k_start_pos = 4094;
  std::string scores;
  AttentionOutputs outputs;
  outputs.scores.bytes = &scores;
  ASSERT_TRUE(engine_->AttentionScores(params, &outputs).ok());
  EXPECT_EQ(engine_->cache_stats().built, 4);
}

}  // namespace
}  // namespace rope
