// ChannelPool against a real ropeserve on 127.0.0.1: --connections=N gives N
// TCP connections (gRPC would otherwise share one between equal channels).
#include "client/load/channel_pool.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/server_process.h"

namespace rope {
namespace load {
namespace {

// ESTABLISHED connections whose remote end is 127.0.0.1:port (the client
// sides of connections to the server), from /proc/net/tcp and, since gRPC
// uses dual-stack sockets, /proc/net/tcp6 (as ::ffff:127.0.0.1).
int ConnectionsTo(int port) {
  int count = 0;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream file(path);
    std::string line;
    std::getline(file, line);  // header
    for (int lines = 0; lines < 100000 && std::getline(file, line); ++lines) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() < 4) continue;
      // fields[2]: rem_address "HEXADDR:HEXPORT"; fields[3]: state, "01" = ESTABLISHED.
      std::vector<std::string> remote = absl::StrSplit(fields[2], ':');
      int remote_port = 0;
      if (remote.size() != 2 || !absl::SimpleHexAtoi(remote[1], &remote_port)) continue;
      const bool loopback = remote[0] == "0100007F" ||
                            remote[0] == "0000000000000000FFFF00000100007F";
      if (loopback && remote_port == port && fields[3] == "01") ++count;
    }
  }
  return count;
}

class ChannelPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<rope::test::ServerProcess>> server =
        rope::test::ServerProcess::Start(ROPESERVE_PATH, {"--listen=127.0.0.1:0", "--backend=cpu"},
                                      absl::Seconds(30));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const std::string& address = server_->address();
    ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port_)) << address;
  }

  std::unique_ptr<rope::test::ServerProcess> server_;
  int port_ = 0;
};

TEST_F(ChannelPoolTest, EachChannelHasItsOwnConnection) {
  absl::StatusOr<std::unique_ptr<ChannelPool>> pool =
      ChannelPool::Create(server_->address(), client::ClientOptions(), 3);
  ASSERT_TRUE(pool.ok()) << pool.status();
  absl::StatusOr<v1::ServerInfo> info = (*pool)->Connect();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->backend(), "cpu");
  EXPECT_EQ(ConnectionsTo(port_), 3);
}

TEST_F(ChannelPoolTest, EqualPlainChannelsShareOneConnection) {
  // Why ChannelPool sets own_connections: without it, gRPC reuses one
  // subchannel (one connection) for channels with equal arguments.
  client::ClientOptions options;
  absl::StatusOr<std::unique_ptr<client::RopeClient>> a =
      client::RopeClient::Create(server_->address(), options);
  absl::StatusOr<std::unique_ptr<client::RopeClient>> b =
      client::RopeClient::Create(server_->address(), options);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->GetServerInfo().ok());
  ASSERT_TRUE((*b)->GetServerInfo().ok());
  EXPECT_EQ(ConnectionsTo(port_), 1);
}

TEST_F(ChannelPoolTest, RefusesZeroConnections) {
  absl::StatusOr<std::unique_ptr<ChannelPool>> pool =
      ChannelPool::Create(server_->address(), client::ClientOptions(), 0);
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pool.status().message().find("connections is 0"), absl::string_view::npos);
}

}  // namespace
}  // namespace load
}  // namespace rope
