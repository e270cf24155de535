// server/service/work_queue.h: every task runs exactly once whoever schedules
// it, in FIFO order on one thread (per client), clients take turns, and the
// destructor runs what is still queued. Built into scripts/tsan.sh's ThreadSanitizer run as well.
#include "server/service/work_queue.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rope {
namespace {

TEST(WorkQueueTest, RunsEveryTaskOnceWhenManyThreadsSchedule) {
  constexpr int kProducers = 4;
  constexpr int kTasksEach = 250;
  // Each task writes only its own slot (no lock): the queue's hand-off must
  // order the producer's Schedule before the task and the task before the
  // destructor's return.
  std::vector<int> runs(kProducers * kTasksEach, 0);
  {
    WorkQueue queue(3);
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([&queue, &runs, p] {
        for (int i = 0; i < kTasksEach; ++i) {
          int* slot = &runs[p * kTasksEach + i];
          queue.Schedule([slot] { ++*slot; });
        }
      });
    }
    for (std::thread& t : producers) t.join();
  }  // ~WorkQueue runs what is left, then joins its threads
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i], 1) << "task " << i;
}

TEST(WorkQueueTest, OneThreadRunsTasksInScheduleOrder) {
  std::vector<int> order;  // touched only by the queue's one thread until joined
  {
    WorkQueue queue(1);
    for (int i = 0; i < 100; ++i) queue.Schedule([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(WorkQueueTest, DestructorRunsTasksQueuedBehindABusyThread) {
  absl::Notification release;
  absl::Mutex mu;
  int ran = 0;
  {
    WorkQueue queue(1);
    queue.Schedule([&] {
      release.WaitForNotificationWithTimeout(absl::Seconds(30));
      absl::MutexLock lock(&mu);
      ++ran;
    });
    // Queued while the only thread is busy with the first task.
    for (int i = 0; i < 10; ++i) {
      queue.Schedule([&] {
        absl::MutexLock lock(&mu);
        ++ran;
      });
    }
    release.Notify();
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ran, 11);
}

// A client that queued a backlog first does not make another client's
// tasks wait behind all of it: free threads take one task per client in
// turn, and each client's own tasks stay in order.
TEST(WorkQueueTest, ClientsTakeTurnsAndEachKeepsItsOrder) {
  absl::Notification started, release;
  std::vector<std::string> order;  // touched only by the queue's one thread until joined
  {
    WorkQueue queue(1);
    queue.Schedule(
        [&] {
          started.Notify();
          release.WaitForNotificationWithTimeout(absl::Seconds(30));
        },
        "flood");
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(30)));
    // Queued while the only thread is busy: flood's backlog first.
    for (int i = 0; i < 5; ++i) {
      queue.Schedule([&order, i] { order.push_back("flood" + std::to_string(i)); }, "flood");
    }
    for (int i = 0; i < 2; ++i) {
      queue.Schedule([&order, i] { order.push_back("steady" + std::to_string(i)); }, "steady");
    }
    queue.Schedule([&order] { order.push_back("anonymous"); });
    release.Notify();
  }
  // Turns in the order the clients queued: flood, steady, anonymous, ...
  EXPECT_EQ(order, (std::vector<std::string>{"flood0", "steady0", "anonymous", "flood1",
                                             "steady1", "flood2", "flood3", "flood4"}));
}

TEST(WorkQueueTest, NonPositiveThreadCountMeansOnePerHardwareThread) {
  const int expected = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(WorkQueue(0).threads(), expected);
  EXPECT_EQ(WorkQueue(-3).threads(), expected);
  EXPECT_EQ(WorkQueue(2).threads(), 2);
}

}  // namespace
}  // namespace rope
