// server/service/client_share.h and CallGate's per-client share: a client
// over its share is refused naming the limit while others are admitted.
#include "server/service/client_share.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/service/call_gate.h"
#include "tests/support/status_matchers.h"

namespace rope {
namespace {

using test::StatusIs;

TEST(ClientShareTest, RefusesTheClientOverItsShareNamingTheLimit) {
  ClientShare share(2);
  ASSERT_TRUE(share.TryAcquire("token:aaaa").ok());
  ASSERT_TRUE(share.TryAcquire("token:aaaa").ok());
  EXPECT_TRUE(StatusIs(share.TryAcquire("token:aaaa"), absl::StatusCode::kResourceExhausted,
                       "client token:aaaa has 2 calls in flight: its share is "
                       "max_calls_per_client 2"));
  EXPECT_TRUE(share.TryAcquire("token:bbbb").ok());  // another client is not affected
  EXPECT_EQ(share.in_flight("token:aaaa"), 2);
  share.Release("token:aaaa");
  EXPECT_TRUE(share.TryAcquire("token:aaaa").ok());
}

TEST(ClientShareTest, RefusalsNameWhatIsCountedAndItsFlag) {
  ClientShare streams(1, "streams open", "max_streams_per_client");
  ASSERT_TRUE(streams.TryAcquire("uid:1000").ok());
  EXPECT_TRUE(StatusIs(streams.TryAcquire("uid:1000"), absl::StatusCode::kResourceExhausted,
                       "client uid:1000 has 1 streams open: its share is "
                       "max_streams_per_client 1"));
}

TEST(ClientShareTest, NoLimitOrNoIdentityIsNeverRefused) {
  ClientShare unlimited(0);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(unlimited.TryAcquire("peer:ipv4:10.0.0.1").ok());
  ClientShare share(1);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(share.TryAcquire("").ok());
}

TEST(ClientShareTest, ReleasedClientsAreForgotten) {
  ClientShare share(1);
  ASSERT_TRUE(share.TryAcquire("a").ok());
  share.Release("a");
  share.Release("a");  // an extra release does not go negative
  EXPECT_EQ(share.in_flight("a"), 0);
  ASSERT_TRUE(share.TryAcquire("a").ok());
  EXPECT_FALSE(share.TryAcquire("a").ok());
}

TEST(CallGateShareTest, AClientOverItsShareDoesNotTakeTheOthersSlots) {
  CallGate gate(/*max_in_flight=*/4, /*max_per_client=*/2);
  ASSERT_TRUE(gate.TryEnter("flood").ok());
  ASSERT_TRUE(gate.TryEnter("flood").ok());
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(StatusIs(gate.TryEnter("flood"), absl::StatusCode::kResourceExhausted,
                         "max_calls_per_client 2"));
  }
  EXPECT_EQ(gate.in_flight(), 2);  // refusals hold nothing
  EXPECT_TRUE(gate.TryEnter("steady").ok());
  EXPECT_TRUE(gate.TryEnter("steady").ok());
  // The global limit still applies, and a refusal there gives the share back.
  EXPECT_TRUE(StatusIs(gate.TryEnter("third"), absl::StatusCode::kResourceExhausted,
                       "max_concurrent_calls 4"));
  EXPECT_EQ(gate.in_flight_of("third"), 0);
  gate.Leave("flood");
  EXPECT_TRUE(gate.TryEnter("third").ok());
  EXPECT_EQ(gate.in_flight_of("flood"), 1);
}

}  // namespace
}  // namespace rope
