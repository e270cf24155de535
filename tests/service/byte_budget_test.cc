// server/service/byte_budget.h: the budget of bytes in flight: immediate
// grants and refusals, waiting until room or the deadline, first-fit order,
// and the invariant under concurrent callers. Built into scripts/tsan.sh's
// ThreadSanitizer run as well.
#include "server/service/byte_budget.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace rope {
namespace {

using test::StatusIs;

constexpr absl::Duration kLongWait = absl::Seconds(30);

// Records the answer of one Reserve.
class Answer {
 public:
  ByteBudget::Done Callback() {
    return [this](absl::Status status) {
      absl::MutexLock lock(&mu_);
      status_ = std::move(status);
    };
  }
  bool answered() const {
    absl::MutexLock lock(&mu_);
    return status_.has_value();
  }
  // Waits (bounded) for the answer.
  absl::Status Get() const {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return status_.has_value(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10))) {
      return absl::DeadlineExceededError("test: no answer within 10s");
    }
    return *status_;
  }

 private:
  mutable absl::Mutex mu_;
  std::optional<absl::Status> status_ ABSL_GUARDED_BY(mu_);
};

absl::Time Forever() { return absl::InfiniteFuture(); }

TEST(ByteBudgetTest, GrantsAtOnceWhatFitsAndCountsIt) {
  ByteBudget budget(1000, kLongWait);
  Answer answer;
  budget.Reserve("Rotate", 300, 300, Forever(), answer.Callback());
  ASSERT_TRUE(answer.answered());  // on the calling thread
  EXPECT_TRUE(answer.Get().ok());
  EXPECT_EQ(budget.in_use_bytes(), 600);
  budget.Release(600);
  EXPECT_EQ(budget.in_use_bytes(), 0);
  EXPECT_EQ(budget.refusals(), 0);
}

TEST(ByteBudgetTest, RefusesACallLargerThanTheWholeBudgetAtOnce) {
  ByteBudget budget(1000, kLongWait);
  Answer answer;
  budget.Reserve("Rotate", 600, 600, Forever(), answer.Callback());
  ASSERT_TRUE(answer.answered());
  EXPECT_TRUE(StatusIs(answer.Get(), absl::StatusCode::kResourceExhausted,
                       "Rotate needs 1200 bytes in flight (request 600 + reply 600): "
                                 "more than the server's whole max_inflight_bytes 1000"));
  EXPECT_EQ(budget.in_use_bytes(), 0);
  EXPECT_EQ(budget.refusals(), 1);
}

TEST(ByteBudgetTest, RefusesAtOnceWhenEvenTheRequestDoesNotFit) {
  ByteBudget budget(1000, kLongWait);
  Answer first, second;
  budget.Reserve("Rotate", 400, 400, Forever(), first.Callback());
  ASSERT_TRUE(first.Get().ok());
  budget.Reserve("Rotate", 300, 300, Forever(), second.Callback());
  ASSERT_TRUE(second.answered());
  EXPECT_TRUE(StatusIs(second.Get(), absl::StatusCode::kResourceExhausted,
                       "800 bytes of the server's max_inflight_bytes 1000 are in use"));
  EXPECT_EQ(budget.in_use_bytes(), 800);
}

TEST(ByteBudgetTest, WaitsForTheReplysRoomAndIsGrantedByARelease) {
  ByteBudget budget(1000, kLongWait);
  Answer first, second;
  budget.Reserve("Rotate", 300, 300, Forever(), first.Callback());
  ASSERT_TRUE(first.Get().ok());
  budget.Reserve("GetTable", 100, 500, Forever(), second.Callback());
  EXPECT_FALSE(second.answered());
  EXPECT_EQ(budget.waiters(), 1);
  EXPECT_EQ(budget.in_use_bytes(), 700);  // the waiter's request is charged
  budget.Release(600);
  ASSERT_TRUE(second.answered());  // granted on the releasing thread
  EXPECT_TRUE(second.Get().ok());
  EXPECT_EQ(budget.in_use_bytes(), 600);
  EXPECT_EQ(budget.waiters(), 0);
}

TEST(ByteBudgetTest, RefusesAWaiterAtItsDeadlineAndReturnsItsRequestBytes) {
  ByteBudget budget(1000, kLongWait);
  Answer first, second;
  budget.Reserve("Rotate", 300, 300, Forever(), first.Callback());
  ASSERT_TRUE(first.Get().ok());
  budget.Reserve("AttentionScores", 100, 500, absl::Now() + absl::Milliseconds(50),
                 second.Callback());
  EXPECT_TRUE(StatusIs(second.Get(), absl::StatusCode::kResourceExhausted,
                       "AttentionScores needs 600 bytes in flight (request 100 + "
                                 "reply 500): waited"));
  EXPECT_TRUE(StatusIs(second.Get(), absl::StatusCode::kResourceExhausted,
                       "room in the server's max_inflight_bytes 1000"));
  EXPECT_EQ(budget.in_use_bytes(), 600);
  EXPECT_EQ(budget.waiters(), 0);
  EXPECT_EQ(budget.refusals(), 1);
}

TEST(ByteBudgetTest, MaxWaitBoundsACallWithoutDeadline) {
  ByteBudget budget(1000, absl::Milliseconds(50));
  Answer first, second;
  budget.Reserve("Rotate", 300, 300, Forever(), first.Callback());
  ASSERT_TRUE(first.Get().ok());
  budget.Reserve("Rotate", 100, 500, Forever(), second.Callback());
  EXPECT_TRUE(StatusIs(second.Get(), absl::StatusCode::kResourceExhausted,
                       "the server's wait limit 50ms"));
}

TEST(ByteBudgetTest, GrantsASmallWaiterPastALargeOneThatDoesNotFit) {
  ByteBudget budget(1000, kLongWait);
  Answer holder, large, small;
  budget.Reserve("Rotate", 300, 300, Forever(), holder.Callback());
  ASSERT_TRUE(holder.Get().ok());
  budget.Reserve("Rotate", 100, 700, Forever(), large.Callback());  // in use 700
  budget.Reserve("Rotate", 50, 300, Forever(), small.Callback());   // in use 750
  EXPECT_EQ(budget.waiters(), 2);
  budget.Release(300);  // in use 450: small fits (+300), large (+700) does not
  ASSERT_TRUE(small.answered());
  EXPECT_TRUE(small.Get().ok());
  EXPECT_FALSE(large.answered());
  budget.Release(350);  // the small call ends: in use 400, large still does not fit
  EXPECT_FALSE(large.answered());
  budget.Release(300);  // the holder ends: in use 100 + 700
  ASSERT_TRUE(large.answered());
  EXPECT_TRUE(large.Get().ok());
  EXPECT_EQ(budget.in_use_bytes(), 800);
}

TEST(ByteBudgetTest, RefuseWaitingAnswersTheWaitersWithTheGivenStatus) {
  ByteBudget budget(1000, kLongWait);
  Answer holder, waiter;
  budget.Reserve("Rotate", 400, 400, Forever(), holder.Callback());
  budget.Reserve("Rotate", 100, 500, Forever(), waiter.Callback());
  budget.RefuseWaiting(absl::UnavailableError("server is draining"));
  EXPECT_TRUE(StatusIs(waiter.Get(), absl::StatusCode::kUnavailable,
                       "draining"));
  EXPECT_EQ(budget.in_use_bytes(), 800);
  EXPECT_EQ(budget.refusals(), 0);
}

TEST(ByteBudgetTest, NonPositiveBudgetGrantsEverythingAndStillCounts) {
  ByteBudget budget(0, kLongWait);
  Answer answer;
  budget.Reserve("Rotate", int64_t{1} << 40, int64_t{1} << 40, Forever(), answer.Callback());
  EXPECT_TRUE(answer.Get().ok());
  EXPECT_EQ(budget.in_use_bytes(), int64_t{1} << 41);
}

TEST(ByteBudgetTest, DestructionRefusesTheCallsStillWaiting) {
  Answer holder, waiter;
  {
    ByteBudget budget(1000, kLongWait);
    budget.Reserve("Rotate", 400, 400, Forever(), holder.Callback());
    budget.Reserve("Rotate", 100, 500, Forever(), waiter.Callback());
  }
  EXPECT_TRUE(holder.Get().ok());
  EXPECT_TRUE(StatusIs(waiter.Get(), absl::StatusCode::kResourceExhausted,
                       "the server stopped"));
}

// One client's share (per_client_bytes): its calls past the share wait while
// another client's are granted; a client with nothing else in flight may
// take the whole budget with one call.
TEST(ByteBudgetShareTest, AClientPastItsShareWaitsWhileAnotherIsGranted) {
  ByteBudget budget(1000, kLongWait, "", /*per_client_bytes=*/400);
  Answer first, second, other;
  budget.Reserve("GetTable", "token:aaaa", 50, 300, Forever(), first.Callback());
  ASSERT_TRUE(first.Get().ok());
  // 350 + 350 > 400: the client's second call waits, its request charged.
  budget.Reserve("GetTable", "token:aaaa", 50, 300, Forever(), second.Callback());
  EXPECT_FALSE(second.answered());
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 400);
  EXPECT_EQ(budget.waiters(), 1);
  // The budget has room (400 of 1000): another client is granted past it.
  budget.Reserve("GetTable", "token:bbbb", 50, 300, Forever(), other.Callback());
  ASSERT_TRUE(other.answered());
  EXPECT_TRUE(other.Get().ok());
  EXPECT_EQ(budget.in_use_bytes(), 750);
  budget.Release("token:bbbb", 350);  // another client's release does not make room
  EXPECT_FALSE(second.answered());
  budget.Release("token:aaaa", 350);  // its own does
  ASSERT_TRUE(second.answered());
  EXPECT_TRUE(second.Get().ok());
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 350);
  budget.Release("token:aaaa", 350);
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 0);
  EXPECT_EQ(budget.in_use_bytes(), 0);
}

TEST(ByteBudgetShareTest, OneCallOfAnIdleClientMayTakeTheWholeBudget) {
  ByteBudget budget(1000, kLongWait, "", /*per_client_bytes=*/400);
  Answer whole, next;
  budget.Reserve("GetTable", "token:aaaa", 100, 800, Forever(), whole.Callback());
  EXPECT_TRUE(whole.Get().ok());
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 900);
  // Beside it, even a small call of the same client is past its share: it
  // waits (its request charged) until the large one returns its bytes.
  budget.Reserve("Rotate", "token:aaaa", 10, 10, Forever(), next.Callback());
  EXPECT_FALSE(next.answered());
  EXPECT_EQ(budget.in_use_bytes(), 910);
  budget.Release("token:aaaa", 900);
  ASSERT_TRUE(next.answered());
  EXPECT_TRUE(next.Get().ok());
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 20);
  budget.Release("token:aaaa", 20);
}

TEST(ByteBudgetShareTest, AWaitPastTheShareEndsNamingTheShare) {
  ByteBudget budget(1000, kLongWait, "", /*per_client_bytes=*/400);
  Answer holder, waiter;
  budget.Reserve("Rotate", "peer:ipv4:10.0.0.1", 100, 200, Forever(), holder.Callback());
  ASSERT_TRUE(holder.Get().ok());
  budget.Reserve("Rotate", "peer:ipv4:10.0.0.1", 50, 200,
                 absl::Now() + absl::Milliseconds(50), waiter.Callback());
  EXPECT_TRUE(StatusIs(waiter.Get(), absl::StatusCode::kResourceExhausted,
                       "for room in its client's share: client peer:ipv4:10.0.0.1 has 300 "
                       "bytes in flight beside it: its share is max_inflight_bytes_per_client "
                       "400"));
  EXPECT_EQ(budget.client_bytes("peer:ipv4:10.0.0.1"), 300);
  EXPECT_EQ(budget.refusals(), 1);
  budget.Release("peer:ipv4:10.0.0.1", 300);
  EXPECT_EQ(budget.in_use_bytes(), 0);
}

// A raw request's charges (wire + parsed before its parse, then its reply's
// top-up) are the client's too: the top-up counts the call's earlier charge
// as its own, TryReserve and a second call's parse charge respect the share.
TEST(ByteBudgetShareTest, RawParseChargesAndTopUpsAreHeldToTheShare) {
  ByteBudget budget(1000, kLongWait, "", /*per_client_bytes=*/400);
  Answer parse, top_up, second_parse, other;
  budget.ReserveParse("Rotate", "token:aaaa", 50, 100, Forever(), parse.Callback());
  ASSERT_TRUE(parse.Get().ok());
  // 150 + 300 > 400, but the 150 are this call's own: nothing else in flight.
  budget.TopUp("Rotate", "token:aaaa", 150, 300, Forever(), top_up.Callback());
  ASSERT_TRUE(top_up.Get().ok());
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 450);
  EXPECT_FALSE(budget.TryReserve("token:aaaa", 10));  // past the share
  EXPECT_TRUE(budget.TryReserve("token:bbbb", 10));   // another client fits
  budget.Release("token:bbbb", 10);
  // The client's second call waits for its parse charge.
  budget.ReserveParse("Rotate", "token:aaaa", 50, 100, Forever(), second_parse.Callback());
  EXPECT_FALSE(second_parse.answered());
  budget.ReserveParse("Rotate", "token:bbbb", 50, 100, Forever(), other.Callback());
  EXPECT_TRUE(other.Get().ok());
  budget.Release("token:aaaa", 450);
  ASSERT_TRUE(second_parse.answered());
  EXPECT_TRUE(second_parse.Get().ok());
  budget.Release("token:aaaa", 150);
  budget.Release("token:bbbb", 150);
  EXPECT_EQ(budget.in_use_bytes(), 0);
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 0);
}

TEST(ByteBudgetShareTest, NoShareWithoutABudgetOrForCallsWithoutAClient) {
  ByteBudget unbudgeted(0, kLongWait, "", /*per_client_bytes=*/400);
  EXPECT_EQ(unbudgeted.per_client_bytes(), 0);
  ByteBudget budget(1000, kLongWait, "", /*per_client_bytes=*/100);
  Answer a, b;
  budget.Reserve("Rotate", "", 300, 300, Forever(), a.Callback());
  budget.Reserve("Rotate", "", 100, 100, Forever(), b.Callback());
  EXPECT_TRUE(a.Get().ok());
  EXPECT_TRUE(b.Get().ok());
  EXPECT_EQ(budget.in_use_bytes(), 800);
}

TEST(ByteBudgetTest, ConcurrentCallersNeverExceedTheBudgetAndAllAreAnswered) {
  constexpr int64_t kBudget = 10000;
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 200;
  ByteBudget budget(kBudget, kLongWait);
  std::atomic<int64_t> held{0}, peak{0}, granted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        const int64_t request = 100 + (t * 37 + i * 11) % 900;
        const int64_t reply = 100 + (t * 53 + i * 7) % 1900;
        absl::Notification answered;
        bool ok = false;
        budget.Reserve("Rotate", request, reply, absl::Now() + absl::Milliseconds(200),
                       [&](absl::Status status) {
                         ok = status.ok();
                         answered.Notify();
                       });
        answered.WaitForNotification();
        if (!ok) {
          ++refused;
          continue;
        }
        ++granted;
        const int64_t now = held.fetch_add(request + reply) + request + reply;
        int64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        held.fetch_sub(request + reply);
        budget.Release(request + reply);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(granted + refused, kThreads * kCallsPerThread);
  EXPECT_GT(granted, 0);
  EXPECT_LE(peak.load(), kBudget);
  EXPECT_EQ(budget.in_use_bytes(), 0);
  EXPECT_EQ(budget.waiters(), 0);
  EXPECT_EQ(budget.refusals(), refused.load());
}

// Many clients, each held to its share, under concurrent callers: neither
// the budget nor any client's share is ever exceeded by calls that each fit
// the share, and every call is answered.
TEST(ByteBudgetShareTest, ConcurrentClientsNeverExceedTheirShares) {
  constexpr int64_t kBudget = 10000;
  constexpr int64_t kShare = 3000;
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 200;
  ByteBudget budget(kBudget, kLongWait, "", kShare);
  std::atomic<int64_t> held{0}, peak{0}, granted{0}, refused{0};
  std::atomic<int64_t> client_held[2] = {0, 0};
  std::atomic<int64_t> client_peak[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int client = t % 2;
      const std::string name = client == 0 ? "token:aaaa" : "token:bbbb";
      for (int i = 0; i < kCallsPerThread; ++i) {
        const int64_t request = 50 + (t * 37 + i * 11) % 450;
        const int64_t reply = 50 + (t * 53 + i * 7) % 950;
        absl::Notification answered;
        bool ok = false;
        budget.Reserve("Rotate", name, request, reply, absl::Now() + absl::Milliseconds(200),
                       [&](absl::Status status) {
                         ok = status.ok();
                         answered.Notify();
                       });
        answered.WaitForNotification();
        if (!ok) {
          ++refused;
          continue;
        }
        ++granted;
        const int64_t bytes = request + reply;
        const int64_t now = held.fetch_add(bytes) + bytes;
        const int64_t mine = client_held[client].fetch_add(bytes) + bytes;
        int64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        seen = client_peak[client].load();
        while (mine > seen && !client_peak[client].compare_exchange_weak(seen, mine)) {
        }
        std::this_thread::yield();
        client_held[client].fetch_sub(bytes);
        held.fetch_sub(bytes);
        budget.Release(name, bytes);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(granted + refused, kThreads * kCallsPerThread);
  EXPECT_GT(granted, 0);
  EXPECT_LE(peak.load(), kBudget);
  EXPECT_LE(client_peak[0].load(), kShare);
  EXPECT_LE(client_peak[1].load(), kShare);
  EXPECT_EQ(budget.in_use_bytes(), 0);
  EXPECT_EQ(budget.client_bytes("token:aaaa"), 0);
  EXPECT_EQ(budget.client_bytes("token:bbbb"), 0);
  EXPECT_EQ(budget.waiters(), 0);
}

}  // namespace
}  // namespace rope
