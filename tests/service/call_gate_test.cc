// server/service/call_gate.h: the limit on calls in flight, draining, and
// waiting for idle, alone and under concurrent callers. Built into
// scripts/tsan.sh's ThreadSanitizer run as well.
#include "server/service/call_gate.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::StatusIs;

TEST(CallGateTest, RefusesTheCallOverTheLimitWithResourceExhausted) {
  CallGate gate(2);
  ASSERT_TRUE(gate.TryEnter().ok());
  ASSERT_TRUE(gate.TryEnter().ok());
  EXPECT_TRUE(StatusIs(gate.TryEnter(), absl::StatusCode::kResourceExhausted,
                       "2 of max_concurrent_calls 2"));
  EXPECT_EQ(gate.in_flight(), 2);  // the refused call holds nothing
  gate.Leave();
  EXPECT_TRUE(gate.TryEnter().ok());
  EXPECT_EQ(gate.in_flight(), 2);
}

TEST(CallGateTest, NonPositiveLimitAdmitsEveryCall) {
  CallGate gate(0);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(gate.TryEnter().ok()) << "call " << i;
  EXPECT_EQ(gate.in_flight(), 1000);
}

TEST(CallGateTest, DrainRefusesNewCallsWithUnavailableAndKeepsAdmittedOnes) {
  CallGate gate(10);
  ASSERT_TRUE(gate.TryEnter().ok());
  EXPECT_FALSE(gate.draining());
  gate.BeginDrain();
  EXPECT_TRUE(gate.draining());
  EXPECT_TRUE(StatusIs(gate.TryEnter(), absl::StatusCode::kUnavailable, "draining"));
  EXPECT_EQ(gate.in_flight(), 1);
  gate.Leave();
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(CallGateTest, WaitForIdleReturnsOnceTheLastCallLeavesOnAnotherThread) {
  CallGate gate(0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(gate.TryEnter().ok());
  absl::Notification waiting;
  std::thread leaver([&] {
    waiting.WaitForNotificationWithTimeout(absl::Seconds(30));
    for (int i = 0; i < 3; ++i) gate.Leave();
  });
  waiting.Notify();
  EXPECT_TRUE(gate.WaitForIdle(absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(gate.in_flight(), 0);
  leaver.join();
}

TEST(CallGateTest, WaitForIdleReturnsFalseAtTheDeadlineWhileACallIsInFlight) {
  CallGate gate(0);
  ASSERT_TRUE(gate.TryEnter().ok());
  EXPECT_FALSE(gate.WaitForIdle(absl::Now() + absl::Milliseconds(20)));
  EXPECT_EQ(gate.in_flight(), 1);
}

TEST(CallGateTest, ConcurrentCallersNeverExceedTheLimit) {
  constexpr int64_t kLimit = 3;
  constexpr int kThreads = 8;
  constexpr int kAttemptsEach = 500;
  CallGate gate(kLimit);
  std::atomic<int64_t> holding{0};
  std::atomic<int64_t> most_held{0};
  std::atomic<int64_t> admitted{0};
  std::atomic<int64_t> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAttemptsEach; ++i) {
        absl::Status s = gate.TryEnter();
        if (!s.ok()) {
          EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
          refused.fetch_add(1);
          continue;
        }
        admitted.fetch_add(1);
        // `holding` counts callers between TryEnter and Leave, so it is never
        // above the gate's own count.
        const int64_t now = holding.fetch_add(1) + 1;
        int64_t most = most_held.load();
        while (now > most && !most_held.compare_exchange_weak(most, now)) {
        }
        std::this_thread::yield();
        holding.fetch_sub(1);
        gate.Leave();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(most_held.load(), kLimit);
  EXPECT_GE(most_held.load(), 1);
  EXPECT_EQ(admitted.load() + refused.load(), kThreads * kAttemptsEach);
  EXPECT_EQ(gate.in_flight(), 0);
}

}  // namespace
}  // namespace rope
