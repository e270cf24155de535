// ListenerWatch and UnacceptedConnections on /proc/net/tcp texts written by
// the test (the EMFILE case itself, against a real server under a small
// RLIMIT_NOFILE, is tests/hostile/emfile_test.py).
#include "server/service/listener_watch.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/service/open_file_limit.h"

namespace rope {
namespace test {
namespace {

// Port 50051 is C383; 0100007F is 127.0.0.1.
constexpr char kHeader[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n";
constexpr char kListening[] =
    "   0: 0100007F:C383 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        "
    "0 191509 1 0000000000000000 100 0 0 10 0\n";
constexpr char kAccepted[] =
    "   1: 0100007F:C383 0100007F:E224 01 00000000:00000000 00:00000000 00000000     0        "
    "0 191515 1 0000000000000000 20 4 30 10 -1\n";
constexpr char kWaiting[] =
    "   2: 0100007F:C383 0100007F:E226 01 00000000:00000000 00:00000000 00000000     0        "
    "0 0 1 0000000000000000 20 4 30 10 -1\n";
constexpr char kWaitingClosed[] =
    "   3: 0100007F:C383 0100007F:E22C 08 00000000:00000000 00:00000000 00000000     0        "
    "0 0 1 0000000000000000 20 4 30 10 -1\n";
constexpr char kOtherPort[] =
    "   4: 0100007F:C384 0100007F:E230 01 00000000:00000000 00:00000000 00000000     0        "
    "0 0 1 0000000000000000 20 4 30 10 -1\n";
constexpr char kTimeWait[] =
    "   5: 0100007F:C383 0100007F:E232 06 00000000:00000000 03:00001770 00000000     0        "
    "0 0 3 0000000000000000\n";

TEST(ListenerWatchTest, FindsOnlyUnacceptedConnectionsToThePort) {
  const std::string text = std::string(kHeader) + kListening + kAccepted + kWaiting +
                           kWaitingClosed + kOtherPort + kTimeWait;
  EXPECT_EQ(UnacceptedConnections(text, 50051),
            (std::vector<std::string>{"0100007F:C383->0100007F:E226",
                                      "0100007F:C383->0100007F:E22C"}));
  EXPECT_TRUE(UnacceptedConnections(text, 50053).empty());
  EXPECT_TRUE(UnacceptedConnections("", 50051).empty());
}

// A folder of this process's own for one test's /proc/net texts: ctest
// runs test processes side by side, and another run may share /tmp.
std::string ProcNetDir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "/listener-watch-" + std::to_string(getpid()) + "-" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

// A connection waiting on port 50051 from 127.0.0.1:`client_port`: kWaiting
// with another client port, so that each is a connection of its own.
std::string WaitingFrom(int client_port) {
  char port[8];
  std::snprintf(port, sizeof(port), "%04X", client_port);
  std::string row = kWaiting;
  row.replace(row.find("E226"), 4, port);
  return row;
}

void WriteProcNet(const std::string& dir, const std::string& tcp) {
  std::ofstream(dir + "/tcp") << kHeader << tcp;
  std::ofstream(dir + "/tcp6") << kHeader;
}

TEST(ListenerWatchTest, ReportsAConnectionLeftWaitingPastTheLimit) {
  const std::string dir = ProcNetDir("stuck");
  WriteProcNet(dir, std::string(kListening) + kWaiting);
  absl::Notification stuck;
  std::string said;
  ListenerWatch::Options options;
  options.port = 50051;
  options.interval = absl::Milliseconds(20);
  options.stuck_after = absl::Milliseconds(200);
  options.proc_net_dir = dir;
  ListenerWatch watch(options, [&](const std::string& what) {
    said = what;
    stuck.Notify();
  });
  ASSERT_TRUE(stuck.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_NE(said.find("the listener on port 50051 has stopped accepting: 1 connection(s)"),
            std::string::npos)
      << said;
}

TEST(ListenerWatchTest, ConnectionsAcceptedInTimeAreNotReported) {
  const std::string dir = ProcNetDir("accepting");
  WriteProcNet(dir, std::string(kListening) + WaitingFrom(0xE000));
  absl::Notification stuck;
  ListenerWatch::Options options;
  options.port = 50051;
  options.interval = absl::Milliseconds(20);
  options.stuck_after = absl::Seconds(1);
  options.proc_net_dir = dir;
  ListenerWatch watch(options, [&](const std::string&) { stuck.Notify(); });
  // Each waiting connection is accepted (and another arrives) well within
  // the limit, for three times the limit: every 100 ms, so that this
  // thread may stall for most of the limit, and each time a connection
  // never seen before, so that the watch missing a file (its thread
  // stalled) cannot join two waits of one connection into one.
  for (int i = 1; i <= 30; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    WriteProcNet(dir, std::string(kListening) + WaitingFrom(0xE000 + i));
  }
  EXPECT_FALSE(stuck.HasBeenNotified());
}

TEST(OpenFileLimitTest, DescribesWhatWasDone) {
  OpenFileLimit raised{1024, 524288, 524288, ""};
  EXPECT_EQ(DescribeOpenFileLimit(raised),
            "open files: soft limit 1024 raised to 524288 (the hard limit)");
  OpenFileLimit kept{4096, 4096, 4096, ""};
  EXPECT_EQ(DescribeOpenFileLimit(kept), "open files: soft limit 4096 (the hard limit is 4096)");
  // Raising never lowers: a second call leaves the limit where the first put it.
  const OpenFileLimit first = RaiseOpenFileLimit();
  const OpenFileLimit second = RaiseOpenFileLimit();
  EXPECT_TRUE(first.error.empty()) << first.error;
  EXPECT_EQ(second.soft, first.soft);
  EXPECT_GE(first.soft, first.soft_before);
}

}  // namespace
}  // namespace test
}  // namespace rope
