// Admission: the limit on calls in flight (across all methods, a stream
// counting as one) and the in-process drain.
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"
#include "tests/support/wait_until.h"

namespace rope {
namespace test {
namespace {

// One unary Rotate issued with the callback client API.
struct AsyncRotate {
  v1::RotateRequest request;
  v1::RotateResponse response;
  grpc::ClientContext context;
  grpc::Status status;
  absl::Notification done;

  bool started = false;

  void Start(v1::RopeService::Stub* stub, unsigned seed) {
    request = MakeRotateRequest(1, 4, 2, 8, 64, 1, seed);
    SetDeadline(&context);
    stub->async()->Rotate(&context, &request, &response, [this](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    started = true;
  }
  // A test that fails early must not free a call gRPC still uses.
  ~AsyncRotate() {
    if (started && !done.HasBeenNotified()) {
      context.TryCancel();
      done.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
  }
  ::testing::AssertionResult FinishedOk() {
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      return ::testing::AssertionFailure() << "call did not finish";
    }
    return GrpcStatusIs(status, grpc::StatusCode::OK, "");
  }
};

class ConcurrencyLimitTest : public ServiceTest {
 protected:
  static constexpr int kLimit = 3;
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.max_concurrent_calls = kLimit;
    StartServer(options);
  }
};

TEST_F(ConcurrencyLimitTest, RefusesCallsOverTheLimitAndFinishesTheHeldOnes) {
  backend_->Hold();
  // Two unary calls and one stream (one message in the backend) fill the 3 slots.
  AsyncRotate held[2];
  held[0].Start(stub_.get(), 1);
  held[1].Start(stub_.get(), 2);
  grpc::ClientContext stream_context;
  SetDeadline(&stream_context);
  auto stream = stub_->RotateStream(&stream_context);
  ASSERT_TRUE(stream->Write(MakeRotateRequest(1, 2, 1, 8)));
  ASSERT_TRUE(backend_->WaitForHeld(3, absl::Seconds(20)));
  EXPECT_EQ(server_->gate().in_flight(), kLimit);

  // Any method is refused while full, without waiting for a slot.
  {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                             grpc::StatusCode::RESOURCE_EXHAUSTED, "max_concurrent_calls 3"));
  }
  {
    v1::ServerInfo info;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                             grpc::StatusCode::RESOURCE_EXHAUSTED, "max_concurrent_calls 3"));
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    auto refused = stub_->RotateStream(&context);
    // A stream is admitted message by message: its first message is refused.
    refused->Write(MakeRotateRequest(1, 2, 1, 8));
    refused->WritesDone();
    v1::RotateResponse reply;
    EXPECT_FALSE(refused->Read(&reply));
    EXPECT_TRUE(GrpcStatusIs(refused->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "max_concurrent_calls 3"));
  }

  backend_->Release();
  EXPECT_TRUE(held[0].FinishedOk());
  EXPECT_TRUE(held[1].FinishedOk());
  v1::RotateResponse reply;
  EXPECT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.q().data().size(), 2u * 8 * 4);
  stream->WritesDone();
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OK, ""));

  // Slots return once gRPC is done with each call (OnDone), just after the
  // client saw its status: wait for that, bounded.
  ASSERT_TRUE(server_->gate().WaitForIdle(absl::Now() + absl::Seconds(20)));
  v1::RotateResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                           grpc::StatusCode::OK, ""));
}

// Streams that never send hold no slot: more idle streams than
// max_concurrent_calls leave every slot to other calls, and each stream is
// served when it does send.
TEST_F(ConcurrencyLimitTest, IdleStreamsHoldNoSlot) {
  constexpr int kStreams = 2 * kLimit;
  grpc::ClientContext contexts[kStreams];
  std::unique_ptr<grpc::ClientReaderWriter<v1::RotateRequest, v1::RotateResponse>>
      streams[kStreams];
  for (int i = 0; i < kStreams; ++i) {
    SetDeadline(&contexts[i]);
    streams[i] = stub_->RotateStream(&contexts[i]);
  }
  for (int round = 0; round < 2; ++round) {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                             grpc::StatusCode::OK, ""));
  }
  EXPECT_EQ(server_->gate().in_flight(), 0);
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(streams[i]->Write(MakeRotateRequest(1, 2, 1, 8)));
    v1::RotateResponse reply;
    ASSERT_TRUE(streams[i]->Read(&reply)) << "stream " << i;
    EXPECT_EQ(reply.q().data().size(), 2u * 8 * 4);
    streams[i]->WritesDone();
    EXPECT_TRUE(GrpcStatusIs(streams[i]->Finish(), grpc::StatusCode::OK, ""));
  }
}

TEST_F(ServiceTest, DrainRefusesNewCallsAndLetsCallsInFlightFinish) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  backend_->Hold();
  AsyncRotate held[2];
  held[0].Start(stub_.get(), 1);
  held[1].Start(stub_.get(), 2);
  ASSERT_TRUE(backend_->WaitForHeld(2, absl::Seconds(20)));

  std::thread drainer([this] { server_->Drain(absl::Seconds(30)); });
  // Drain() flips the gate first thing; wait for it, bounded.
  ASSERT_TRUE(WaitUntil([&] { return server_->gate().draining(); }));

  {
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(
        GrpcStatusIs(health->Check(&context, request, &response), grpc::StatusCode::OK, ""));
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  }
  {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                             grpc::StatusCode::UNAVAILABLE, "server is draining"));
  }

  backend_->Release();
  EXPECT_TRUE(held[0].FinishedOk());
  EXPECT_TRUE(held[1].FinishedOk());
  drainer.join();
  EXPECT_EQ(server_->gate().in_flight(), 0);
}

TEST_F(ServiceTest, DrainCancelsCallsStillRunningAtTheDeadline) {
  backend_->Hold();
  AsyncRotate held;
  held.Start(stub_.get(), 1);
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(20)));
  std::thread drainer([this] { server_->Drain(absl::Milliseconds(200)); });
  // The call is still held when the grace period ends: gRPC cancels it, and
  // the client sees UNAVAILABLE (retryable elsewhere).
  ASSERT_TRUE(held.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(GrpcStatusIs(held.status, grpc::StatusCode::UNAVAILABLE, "Cancelling all calls"));
  backend_->Release();
  drainer.join();
}

}  // namespace
}  // namespace test
}  // namespace rope
