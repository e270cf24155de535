// server/service/stream_limits.h through a real server: an idle RotateStream
// is finished UNAVAILABLE by --stream_idle_timeout while a stream on the same
// channel that keeps sending is served throughout; the streams one client
// keeps open are counted (--max_streams_per_client): one more is refused at
// open, and a stream that ends gives its place back. Two clients apart, and
// ModelStreamInfer, are in tests/hostile/stream_limits_test.py (raw HTTP/2
// from two source addresses).
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"
#include "tests/support/grpc_test_util.h"

namespace rope {
namespace test {
namespace {

constexpr absl::Duration kIdleTimeout = absl::Seconds(1);
constexpr int64_t kStreamsPerClient = 2;

class StreamLimitsTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.stream_idle_timeout = kIdleTimeout;
    options.max_streams_per_client = kStreamsPerClient;
    StartServer(options);
  }

  // A stream on stub_, with its context.
  struct OpenStream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::RotateRequest, v1::RotateResponse>> stream;
  };
  std::unique_ptr<OpenStream> Open() {
    auto open = std::make_unique<OpenStream>();
    SetDeadline(&open->context);
    open->stream = stub_->RotateStream(&open->context);
    return open;
  }
  // One message answered on `open`.
  static bool RoundTrip(OpenStream& open) {
    v1::RotateResponse reply;
    return open.stream->Write(MakeRotateRequest(1, 2, 1, 8)) && open.stream->Read(&reply) &&
           reply.q().data().size() == 2 * 8 * 4;
  }
};

TEST_F(StreamLimitsTest, AnIdleStreamIsFinishedWhileAnActiveOneIsServed) {
  std::unique_ptr<OpenStream> idle = Open();
  std::unique_ptr<OpenStream> active = Open();
  // The active stream sends every quarter of the timeout (and its round
  // trip) for at least three timeouts: counted in messages, not read off
  // the clock, so that a slow machine sends as many and waits longer.
  constexpr int kMessages = 12;
  for (int sent = 0; sent < kMessages; ++sent) {
    ASSERT_TRUE(RoundTrip(*active)) << "message " << sent;
    absl::SleepFor(kIdleTimeout / 4);
  }
  v1::RotateResponse reply;
  EXPECT_FALSE(idle->stream->Read(&reply));
  EXPECT_TRUE(GrpcStatusIs(idle->stream->Finish(), grpc::StatusCode::UNAVAILABLE,
                           "RotateStream: no message for 1s (stream_idle_timeout 1s): the server "
                           "finished the idle stream; open a new one to send more"));
  EXPECT_EQ(server_->stream_limits().idled_out(), 1);
  // The idle one gave its place back before its status was sent.
  EXPECT_EQ(server_->stream_limits().open_total(), 1);  // the active one
  ASSERT_TRUE(RoundTrip(*active));
  ASSERT_TRUE(active->stream->WritesDone());
  EXPECT_TRUE(GrpcStatusIs(active->stream->Finish(), grpc::StatusCode::OK, ""));
}

TEST_F(StreamLimitsTest, AStreamBetweenSlowMessagesIsNotIdle) {
  // Each gap is a quarter of the timeout (and a round trip: three quarters
  // of the timeout are left for a slow machine's), the sum 2.5 timeouts.
  std::unique_ptr<OpenStream> slow = Open();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(RoundTrip(*slow)) << "message " << i;
    absl::SleepFor(kIdleTimeout / 4);
  }
  ASSERT_TRUE(slow->stream->WritesDone());
  EXPECT_TRUE(GrpcStatusIs(slow->stream->Finish(), grpc::StatusCode::OK, ""));
}

TEST_F(StreamLimitsTest, OneStreamPastTheClientsShareIsRefusedAtOpen) {
  // Each on its own channel (connection): the count is the client's.
  std::unique_ptr<OpenStream> first = Open();
  auto other_channel = NewChannel();
  auto other_stub = v1::RopeService::NewStub(other_channel);
  OpenStream second;
  SetDeadline(&second.context);
  second.stream = other_stub->RotateStream(&second.context);
  ASSERT_TRUE(RoundTrip(*first));
  ASSERT_TRUE(RoundTrip(second));

  std::unique_ptr<OpenStream> refused = Open();
  v1::RotateResponse reply;
  EXPECT_FALSE(refused->stream->Read(&reply));
  EXPECT_TRUE(GrpcStatusIs(refused->stream->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "RotateStream refused at open: client peer:ipv4:127.0.0.1 has 2 "
                           "streams open: its share is max_streams_per_client 2; retry later"));
  // Unary calls are not streams: still served.
  v1::RotateResponse unary;
  EXPECT_TRUE(GrpcStatusIs(Rotate(MakeRotateRequest(1, 2, 1, 8), &unary), grpc::StatusCode::OK,
                           ""));

  // An ended stream gives its place back before its status is sent: the
  // client opens the next one at once, without a retry.
  ASSERT_TRUE(first->stream->WritesDone());
  EXPECT_TRUE(GrpcStatusIs(first->stream->Finish(), grpc::StatusCode::OK, ""));
  std::unique_ptr<OpenStream> again = Open();
  EXPECT_TRUE(RoundTrip(*again));
  again->stream->WritesDone();
  EXPECT_TRUE(GrpcStatusIs(again->stream->Finish(), grpc::StatusCode::OK, ""));
  ASSERT_TRUE(second.stream->WritesDone());
  EXPECT_TRUE(GrpcStatusIs(second.stream->Finish(), grpc::StatusCode::OK, ""));
}

TEST_F(StreamLimitsTest, GetServerInfoReportsTheStreamLimits) {
  v1::ServerInfo info;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(GrpcStatusIs(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                           grpc::StatusCode::OK, ""));
  EXPECT_EQ(info.limits().max_streams_per_client(), kStreamsPerClient);
  EXPECT_EQ(info.limits().stream_idle_timeout_ms(), 1000);
  EXPECT_EQ(info.limits().max_inflight_bytes_per_client(), 0);  // no budget here
}

}  // namespace
}  // namespace test
}  // namespace rope
