// core/engine/table_cache.h: byte budget, LRU order, exact counters, one
// build per key under concurrent misses, and oversize tables.
#include "core/engine/table_cache.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <list>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::StatusIs;

// rotary_dim 2 makes a table 8 bytes per row (one cos and one sin float), so
// sizes below are 8 * max_len.
TableKey SmallKey(uint32_t max_len, double theta = 10000) {
  TableKey key;
  key.theta = theta;
  key.rotary_dim = 2;
  key.max_len = max_len;
  return key;
}

// Builds real tables and counts how often it was asked to.
struct CountingBuilder {
  std::atomic<int> builds{0};
  TableCache::Builder Fn() {
    return [this](const TableKey& key, int64_t block) {
      builds.fetch_add(1);
      return TableBlock::Build(key, block);
    };
  }
};

void ExpectStats(const TableCache& cache, int64_t hits, int64_t misses, int64_t evictions,
                 int64_t entries, int64_t bytes) {
  const TableCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, hits);
  EXPECT_EQ(s.misses, misses);
  EXPECT_EQ(s.evictions, evictions);
  EXPECT_EQ(s.entries, entries);
  EXPECT_EQ(s.bytes, bytes);
}

TEST(TableCacheTest, SecondLookupIsAHitOnTheSameTable) {
  CountingBuilder builder;
  TableCache cache(1 << 20, builder.Fn());
  auto first = cache.Get(SmallKey(64));
  auto second = cache.Get(SmallKey(64));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*first)->block(0), (*second)->block(0));  // the same block, built once
  EXPECT_TRUE((*first)->key() == SmallKey(64));
  EXPECT_EQ(builder.builds.load(), 1);
  ExpectStats(cache, /*hits=*/1, /*misses=*/1, /*evictions=*/0, /*entries=*/1, /*bytes=*/512);
  EXPECT_EQ(cache.stats().budget_bytes, 1 << 20);
}

TEST(TableCacheTest, KeysDifferingInAnyFieldAreDifferentTables) {
  CountingBuilder builder;
  TableCache cache(1 << 20, builder.Fn());
  TableKey base = SmallKey(64);
  TableKey other_theta = SmallKey(64, 500000);
  TableKey other_dim = base;
  other_dim.rotary_dim = 4;
  TableKey other_len = SmallKey(65);
  for (const TableKey& key : {base, other_theta, other_dim, other_len}) {
    ASSERT_TRUE(cache.Get(key).ok());
  }
  EXPECT_EQ(builder.builds.load(), 4);
  EXPECT_EQ(cache.stats().entries, 4);
}

TEST(TableCacheTest, CountersAreExact) {
  CountingBuilder builder;
  TableCache cache(/*budget_bytes=*/1000, builder.Fn());
  const TableKey a = SmallKey(50), b = SmallKey(50, 20000), c = SmallKey(30);  // 400, 400, 240
  ASSERT_TRUE(cache.Get(a).ok());  // miss
  ASSERT_TRUE(cache.Get(b).ok());  // miss
  ExpectStats(cache, 0, 2, 0, 2, 800);
  ASSERT_TRUE(cache.Get(a).ok());  // hit; LRU order now a, b
  ASSERT_TRUE(cache.Get(c).ok());  // miss; 1040 > 1000 evicts b
  ExpectStats(cache, 1, 3, 1, 2, 640);
  ASSERT_TRUE(cache.Get(b).ok());  // miss; 1040 > 1000 evicts a (order c, a)
  ExpectStats(cache, 1, 4, 2, 2, 640);
  ASSERT_TRUE(cache.Get(c).ok());  // hit
  ExpectStats(cache, 2, 4, 2, 2, 640);
  EXPECT_EQ(builder.builds.load(), 4);
}

TEST(TableCacheTest, TouchedEntryStaysAndLeastRecentIsEvicted) {
  CountingBuilder builder;
  TableCache cache(/*budget_bytes=*/3 * 800, builder.Fn());  // room for three
  const TableKey a = SmallKey(100, 1000), b = SmallKey(100, 2000), c = SmallKey(100, 3000),
                 d = SmallKey(100, 4000);
  ASSERT_TRUE(cache.Get(a).ok());
  ASSERT_TRUE(cache.Get(b).ok());
  ASSERT_TRUE(cache.Get(c).ok());
  ASSERT_TRUE(cache.Get(a).ok());  // a is now the most recent; b the least
  ASSERT_TRUE(cache.Get(d).ok());  // evicts b
  EXPECT_EQ(builder.builds.load(), 4);
  ASSERT_TRUE(cache.Get(a).ok());
  ASSERT_TRUE(cache.Get(c).ok());
  ASSERT_TRUE(cache.Get(d).ok());
  EXPECT_EQ(builder.builds.load(), 4) << "a, c and d should still be cached";
  ASSERT_TRUE(cache.Get(b).ok());
  EXPECT_EQ(builder.builds.load(), 5) << "b should have been evicted";
}

TEST(TableCacheTest, TableOfExactlyTheBudgetFits) {
  TableCache cache(/*budget_bytes=*/800);
  auto table = cache.Get(SmallKey(100));
  ASSERT_TRUE(table.ok()) << table.status();
  ExpectStats(cache, 0, 1, 0, 1, 800);
}

TEST(TableCacheTest, TableLargerThanTheBudgetIsResourceExhausted) {
  CountingBuilder builder;
  TableCache cache(/*budget_bytes=*/799, builder.Fn());
  auto table = cache.Get(SmallKey(100));  // 800 bytes
  EXPECT_TRUE(StatusIs(table.status(), absl::StatusCode::kResourceExhausted, "800"));
  EXPECT_TRUE(StatusIs(table.status(), absl::StatusCode::kResourceExhausted, "799"));
  EXPECT_EQ(builder.builds.load(), 0) << "an oversize table should be refused before building";
  ExpectStats(cache, 0, 0, 0, 0, 0);
  // The cache still works afterwards.
  EXPECT_TRUE(cache.Get(SmallKey(99)).ok());
}

// A table a call holds is never evicted: the budget bounds every table in
// memory. A miss that finds no room beside it is refused before building, and
// served once the holder lets go.
TEST(TableCacheTest, HeldTableIsNotEvictedAndAMissWithoutRoomIsRefused) {
  CountingBuilder builder;
  TableCache cache(/*budget_bytes=*/800, builder.Fn());
  auto held = cache.Get(SmallKey(100, 1000));
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(StatusIs(cache.Get(SmallKey(100, 2000)).status(),
                       absl::StatusCode::kResourceExhausted,
                       "budget of 800 bytes is held by calls in flight (800 bytes"));
  EXPECT_EQ(builder.builds.load(), 1) << "the refused table was built";
  ExpectStats(cache, 0, 1, 0, 1, 800);
  EXPECT_NEAR((*held)->cos_row(99)[0], std::cos(99.0), 1.2e-7);
  held->reset();
  ASSERT_TRUE(cache.Get(SmallKey(100, 2000)).ok());  // evicts the table no one holds
  ExpectStats(cache, 0, 2, 1, 1, 800);
}

// The device cache keeps the other policy: a value evicted while held stays
// valid for its holders (a cancelled call's kernels may still read it).
TEST(KeyedLruCacheTest, MayExceedBudgetEvictsAHeldValueThatStaysValid) {
  KeyedLruCache<TableKey, int> cache(/*budget_bytes=*/10, "test-cache");
  auto build = [](int v) {
    return [v]() -> absl::StatusOr<std::shared_ptr<const int>> {
      return std::make_shared<const int>(v);
    };
  };
  auto held = cache.Get(SmallKey(1, 1000), 10, build(1));
  ASSERT_TRUE(held.ok());
  auto other = cache.Get(SmallKey(1, 2000), 10, build(2));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(**held, 1);
}

// A value whose destructor asks, from another thread, for the cache's stats
// (which take the cache's lock) and records whether they came back: they
// cannot while the destroying thread holds that lock.
struct LockCheckedValue;

struct LockCheck {
  const KeyedLruCache<TableKey, LockCheckedValue>* cache = nullptr;
  absl::Notification stats_returned;
  bool destroyed_under_lock = false;
};

struct LockCheckedValue {
  LockCheck* check = nullptr;
  ~LockCheckedValue() {
    LockCheck* c = check;
    if (c == nullptr) return;
    // Detached: under the lock it can only finish after this destructor has
    // returned and the lock is released.
    std::thread([c] {
      (void)c->cache->stats();
      c->stats_returned.Notify();
    }).detach();
    c->destroyed_under_lock = !c->stats_returned.WaitForNotificationWithTimeout(absl::Seconds(10));
  }
};

// Both caches (host tables, device tables) are this template: destroying an
// evicted value (unmapping a host table, freeing device memory) must not
// hold up every other lookup.
TEST(KeyedLruCacheTest, EvictedValueIsDestroyedAfterTheLockIsReleased) {
  KeyedLruCache<TableKey, LockCheckedValue> cache(/*budget_bytes=*/100, "test cache");
  LockCheck check;
  check.cache = &cache;
  auto first =
      cache.Get(SmallKey(1), 100, [&]() -> absl::StatusOr<std::shared_ptr<const LockCheckedValue>> {
        auto value = std::make_shared<LockCheckedValue>();
        value->check = &check;
        return std::shared_ptr<const LockCheckedValue>(std::move(value));
      });
  ASSERT_TRUE(first.ok()) << first.status();
  first->reset();  // only the cache holds it now
  auto second = cache.Get(SmallKey(2), 100, [] {
    return absl::StatusOr<std::shared_ptr<const LockCheckedValue>>(
        std::make_shared<const LockCheckedValue>());
  });
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(check.stats_returned.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the evicted value was not destroyed";
  EXPECT_FALSE(check.destroyed_under_lock)
      << "the evicted value was destroyed under the cache's lock";
  EXPECT_EQ(cache.stats().evictions, 1);
}

TEST(TableCacheTest, FailedBuildIsReportedAndRetried) {
  std::atomic<int> calls{0};
  TableCache cache(1 << 20,
                   [&](const TableKey& key, int64_t block) -> std::shared_ptr<const TableBlock> {
                     if (calls.fetch_add(1) == 0) return nullptr;
                     return TableBlock::Build(key, block);
                   });
  auto first = cache.Get(SmallKey(10));
  EXPECT_TRUE(StatusIs(first.status(), absl::StatusCode::kInternal, "max_len=10"));
  auto second = cache.Get(SmallKey(10));
  EXPECT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(cache.stats().entries, 1);
}

// An LRU model with the documented policy, to compare every counter against
// after each lookup of a random churn.
class LruModel {
 public:
  explicit LruModel(int64_t budget) : budget_(budget) {}

  void Get(int key, int64_t size) {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        ++hits;
        return;
      }
    }
    ++misses;
    while (bytes + size > budget_ && !lru_.empty()) {
      bytes -= lru_.back().second;
      lru_.pop_back();
      ++evictions;
    }
    lru_.emplace_front(key, size);
    bytes += size;
  }
  int64_t entries() const { return static_cast<int64_t>(lru_.size()); }

  int64_t hits = 0, misses = 0, evictions = 0, bytes = 0;

 private:
  const int64_t budget_;
  std::list<std::pair<int, int64_t>> lru_;  // front = most recent
};

TEST(TableCacheTest, RandomChurnStaysWithinBudgetAndMatchesLruModel) {
  constexpr int kKeys = 30;
  constexpr int64_t kBudget = 4000;
  std::vector<TableKey> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(SmallKey(10 + 13 * i));  // 80 .. 3096 bytes
  TableCache cache(kBudget);
  LruModel model(kBudget);
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> pick(0, kKeys - 1);
  for (int step = 0; step < 2000; ++step) {
    const int i = pick(rng);
    auto table = cache.Get(keys[i]);
    ASSERT_TRUE(table.ok()) << table.status();
    ASSERT_TRUE((*table)->key() == keys[i]) << "step " << step;
    model.Get(i, TableBytes(keys[i]));
    const TableCacheStats s = cache.stats();
    ASSERT_LE(s.bytes, kBudget) << "step " << step;
    ASSERT_EQ(s.bytes, model.bytes) << "step " << step;
    ASSERT_EQ(s.entries, model.entries()) << "step " << step;
    ASSERT_EQ(s.hits, model.hits) << "step " << step;
    ASSERT_EQ(s.misses, model.misses) << "step " << step;
    ASSERT_EQ(s.evictions, model.evictions) << "step " << step;
  }
  // The churn exercised both paths.
  EXPECT_GT(model.hits, 100);
  EXPECT_GT(model.evictions, 100);
}

TEST(TableCacheTest, ConcurrentMissesOfOneKeyBuildOnce) {
  constexpr int kThreadsPerKey = 4;
  const TableKey keys[] = {SmallKey(256, 10000), SmallKey(256, 20000)};
  std::atomic<int> builds{0};
  absl::Notification first_build_started;
  absl::Notification release;
  TableCache cache(1 << 20, [&](const TableKey& key, int64_t block) {
    if (builds.fetch_add(1) == 0) first_build_started.Notify();
    // Hold every build until the other threads have had time to pile up on
    // the same keys. Correctness does not depend on the wait; it only makes
    // duplicate builds likely if the cache allowed them.
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return TableBlock::Build(key, block);
  });

  std::vector<std::shared_ptr<const RopeTable>> got(2 * kThreadsPerKey);
  std::vector<absl::Status> status(2 * kThreadsPerKey);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kThreadsPerKey; ++t) {
    threads.emplace_back([&, t] {
      auto table = cache.Get(keys[t % 2]);
      status[t] = table.status();
      if (table.ok()) got[t] = *table;
    });
  }
  EXPECT_TRUE(first_build_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(200));
  release.Notify();
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(builds.load(), 2);
  for (int t = 0; t < 2 * kThreadsPerKey; ++t) {
    EXPECT_TRUE(status[t].ok()) << status[t];
    ASSERT_NE(got[t], nullptr);
    EXPECT_EQ(got[t]->block(0), got[t % 2]->block(0)) << "thread " << t;
    EXPECT_TRUE(got[t]->key() == keys[t % 2]);
  }
  ExpectStats(cache, /*hits=*/2 * kThreadsPerKey - 2, /*misses=*/2, 0, 2, 2 * 256 * 8);
}

}  // namespace
}  // namespace rope
