// WaitUntil: true once another thread settles the state, false at the bound
// for state that never settles (so a test built on it still fails then).
#include "tests/support/wait_until.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rope {
namespace test {
namespace {

TEST(WaitUntilTest, ReturnsTrueOnceAnotherThreadSettlesTheState) {
  std::atomic<bool> settled{false};
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(20));
    settled.store(true);
  });
  EXPECT_TRUE(WaitUntil([&] { return settled.load(); }));
  setter.join();
}

TEST(WaitUntilTest, ReturnsFalseAtTheBoundForStateThatNeverSettles) {
  int calls = 0;
  EXPECT_FALSE(WaitUntil(
      [&] {
        ++calls;
        return false;
      },
      absl::Milliseconds(30), absl::Milliseconds(5)));
  EXPECT_GE(calls, 2);  // polled, and once more at the bound
}

TEST(WaitUntilTest, SettledAtOnceIsOneCall) {
  int calls = 0;
  EXPECT_TRUE(WaitUntil([&] {
    ++calls;
    return true;
  }));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace test
}  // namespace rope
