#include "server/service/send_watch.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rope {
namespace {

constexpr absl::Duration kBound = absl::Seconds(30);

TEST(SendWatchTest, OffArmsNothing) {
  SendWatch watch(absl::InfiniteDuration());
  bool ran = false;
  EXPECT_EQ(watch.Arm([&ran] { ran = true; }), 0u);
  watch.Disarm(0);
  EXPECT_FALSE(ran);
  EXPECT_EQ(watch.expired(), 0);
}

TEST(SendWatchTest, RunsTheCallbackOnceTheTimeoutHasPassed) {
  SendWatch watch(absl::Milliseconds(20));
  absl::Notification expired;
  const absl::Time armed = absl::Now();
  EXPECT_NE(watch.Arm([&expired] { expired.Notify(); }), 0u);
  ASSERT_TRUE(expired.WaitForNotificationWithTimeout(kBound));
  EXPECT_GE(absl::Now() - armed, absl::Milliseconds(20));
}

// Disarmed before its deadline, a callback never runs: the ticket armed
// after it (a later deadline) expires, and the first did not. The timeout
// is long enough that this thread, stalled between Arm and Disarm on a busy
// machine, still disarms before the deadline.
TEST(SendWatchTest, ADisarmedCallbackNeverRuns) {
  SendWatch watch(absl::Seconds(1));
  std::atomic<bool> first_ran{false};
  const SendWatch::Ticket first = watch.Arm([&first_ran] { first_ran = true; });
  watch.Disarm(first);
  absl::Notification second;
  watch.Arm([&second] { second.Notify(); });
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(kBound));
  EXPECT_FALSE(first_ran);
  EXPECT_EQ(watch.expired(), 1);
}

TEST(SendWatchTest, CallbacksRunInDeadlineOrder) {
  SendWatch watch(absl::Milliseconds(10));
  std::atomic<int> order{0};
  int first = -1, second = -1;
  absl::Notification done;
  watch.Arm([&] { first = order++; });
  watch.Arm([&] {
    second = order++;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
}

// What the service relies on: once Disarm returns, the callback (which
// cancels a call whose reactor is about to be deleted) is over.
TEST(SendWatchTest, DisarmWaitsForACallbackThatIsRunning) {
  SendWatch watch(absl::Milliseconds(1));
  absl::Notification started, release;
  std::atomic<bool> finished{false};
  const SendWatch::Ticket ticket = watch.Arm([&] {
    started.Notify();
    release.WaitForNotificationWithTimeout(kBound);
    finished = true;
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kBound));
  std::atomic<bool> finished_when_disarmed{false};
  std::thread disarm([&] {
    watch.Disarm(ticket);
    finished_when_disarmed = finished.load();
  });
  release.Notify();
  disarm.join();
  EXPECT_TRUE(finished_when_disarmed);
}

// A callback may end the call synchronously, whose reactor then disarms its
// own ticket on the watch's thread: that must not wait for itself.
TEST(SendWatchTest, DisarmFromWithinTheCallbackReturns) {
  SendWatch watch(absl::Milliseconds(1));
  absl::Notification done;
  SendWatch::Ticket ticket = 0;
  absl::Notification armed;
  ticket = watch.Arm([&] {
    armed.WaitForNotificationWithTimeout(kBound);
    watch.Disarm(ticket);
    done.Notify();
  });
  armed.Notify();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kBound));
}

TEST(SendWatchTest, DestroyingTheWatchDropsWhatIsArmed) {
  bool ran = false;
  {
    SendWatch watch(absl::Hours(1));
    watch.Arm([&ran] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace rope
