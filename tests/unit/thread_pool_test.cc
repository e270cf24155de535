// common/thread_pool.h: ParallelFor covers [0, n) exactly once
// with chunks of at least min_chunk, also when many callers share the pool.
// Built into scripts/tsan.sh's ThreadSanitizer run as well.
#include "common/thread_pool.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace rope {
namespace {

// Each index is written by whichever thread runs its chunk (no lock): the
// pool must order those writes before ParallelFor returns.
void ExpectEachIndexOnce(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<int> hits(n, 0);
  absl::Mutex mu;
  int64_t shortest = n;
  int64_t chunks = 0;
  pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ++hits[i];
    absl::MutexLock lock(&mu);
    ++chunks;
    if (end < n) shortest = std::min(shortest, end - begin);  // the last may be short
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "index " << i << " of " << n;
  absl::MutexLock lock(&mu);
  EXPECT_GE(chunks, 1);
  if (chunks > 1) {
    EXPECT_GE(shortest, min_chunk);
  }
}

TEST(ThreadPoolTest, CoversEveryIndexOnceForManySizes) {
  ThreadPool pool(4);
  for (int64_t n : {1, 2, 3, 7, 16, 100, 1000, 4097}) {
    for (int64_t min_chunk : {1, 3, 64}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " min_chunk=" << min_chunk);
      ExpectEachIndexOnce(pool, n, min_chunk);
    }
  }
}

TEST(ThreadPoolTest, EmptyRangeNeverCallsTheFunction) {
  ThreadPool pool(2);
  int calls = 0;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { ++calls; });
  pool.ParallelFor(-5, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, OneThreadRunsTheWholeRangeAsOneChunkOnTheCaller) {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  pool.ParallelFor(1000, 1, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 1000);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, ConcurrentCallersEachGetTheirWholeRange) {
  ThreadPool pool(3);
  constexpr int kCallers = 4;
  constexpr int kLoopsEach = 25;
  std::vector<int> failures(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&pool, &failures, c] {
      for (int loop = 0; loop < kLoopsEach; ++loop) {
        const int64_t n = 200 + 37 * c + loop;
        std::vector<int> hits(n, 0);
        pool.ParallelFor(n, 4, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++hits[i];
        });
        for (int64_t i = 0; i < n; ++i) failures[c] += hits[i] != 1;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(failures[c], 0) << "caller " << c;
}

}  // namespace
}  // namespace rope
