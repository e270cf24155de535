// Operations surface of an in-process server: grpc.health.v1, the
// Prometheus endpoint, and the bench-only Echo being opt-in.
#include <string>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rope/bench/v1/echo.grpc.pb.h"
#include "tests/service/service_fixture.h"

namespace rope {
namespace test {
namespace {

grpc::health::v1::HealthCheckResponse::ServingStatus CheckHealth(grpc::Channel* channel,
                                                                 const std::string& service,
                                                                 grpc::Status* status) {
  auto health = grpc::health::v1::Health::NewStub(
      std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  *status = health->Check(&context, request, &response);
  return response.status();
}

TEST_F(ServiceTest, MetricsAreOffWithoutAnAddress) { EXPECT_EQ(server_->metrics_port(), 0); }

TEST_F(ServiceTest, HealthIsServingForTheServerAndTheRopeService) {
  grpc::Status status;
  EXPECT_EQ(CheckHealth(channel_.get(), "", &status),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(GrpcStatusIs(status, grpc::StatusCode::OK, ""));
  EXPECT_EQ(CheckHealth(channel_.get(), "rope.v1.RopeService", &status),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(GrpcStatusIs(status, grpc::StatusCode::OK, ""));
  CheckHealth(channel_.get(), "no.such.Service", &status);
  EXPECT_TRUE(GrpcStatusIs(status, grpc::StatusCode::NOT_FOUND, ""));
}

class MetricsTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.metrics_address = "127.0.0.1:0";
    StartServer(options);
  }
};

// A long AttentionScores whose client cancels it once the server is working
// on it: the server must stop the work (recording CANCELLED), not finish it
// with OK for nobody. Both "working on it" (rope_calls_in_flight) and "how it
// ended" (rope_requests_total) are read from the server's own metrics, so
// nothing here depends on how fast this machine is. (The deadline path is
// the same Interrupt; tests/unit/attention_test.cc covers its check.)
TEST_F(MetricsTest, AttentionScoresStopsWhenTheClientCancels) {
  ASSERT_NE(server_->metrics_port(), 0);
  // q, k [1, 2048, 8, 512] float32: about 34 GFLOP, seconds on these cores.
  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(512, 4096);
  *request.mutable_q() = MakeRotateRequest(1, 2048, 8, 512, 4096, 0, 1).q();
  *request.mutable_k() = MakeRotateRequest(1, 2048, 8, 512, 4096, 0, 2).q();
  v1::AttentionScoresResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(120));
  absl::Notification done;
  grpc::Status status;
  stub_->async()->AttentionScores(&context, &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });

  const std::string in_flight = "rope_calls_in_flight";
  bool working = false;
  for (int i = 0; i < 3000 && !working && !done.HasBeenNotified(); ++i) {  // at most ~60 s
    working = MetricValue(HttpGetMetrics(server_->metrics_port()), in_flight) >= 1;
    if (!working) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(working) << "the server never started the call";
  context.TryCancel();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();

  const std::string ok = "rope_requests_total{code=\"OK\",rpc=\"AttentionScores\"}";
  const std::string cancelled = "rope_requests_total{code=\"CANCELLED\",rpc=\"AttentionScores\"}";
  std::string metrics;
  for (int i = 0; i < 600; ++i) {  // at most ~60 s for the server to end the call its way
    metrics = HttpGetMetrics(server_->metrics_port());
    if (MetricValue(metrics, ok) > 0 || MetricValue(metrics, cancelled) > 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(MetricValue(metrics, ok), -1) << "the server finished work nobody waited for";
  EXPECT_EQ(MetricValue(metrics, cancelled), 1) << metrics;
}

TEST_F(MetricsTest, EndpointCountsRequestsByMethodAndCode) {
  ASSERT_NE(server_->metrics_port(), 0);
  const std::string ok_series = "rope_requests_total{code=\"OK\",rpc=\"Rotate\"}";
  const std::string bad_series = "rope_requests_total{code=\"INVALID_ARGUMENT\",rpc=\"Rotate\"}";
  const std::string before = HttpGetMetrics(server_->metrics_port());
  ASSERT_NE(before.find("200 OK"), std::string::npos) << before;
  EXPECT_EQ(MetricValue(before, ok_series), -1);  // no such call yet

  for (int i = 0; i < 3; ++i) {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                             grpc::StatusCode::OK, ""));
  }
  {
    v1::RotateRequest bad = MakeRotateRequest(1, 2, 1, 8);
    bad.mutable_config()->set_head_dim(3);
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, bad, &response),
                             grpc::StatusCode::INVALID_ARGUMENT, "head_dim"));
  }

  const std::string after = HttpGetMetrics(server_->metrics_port());
  EXPECT_EQ(MetricValue(after, ok_series), 3) << after;
  EXPECT_EQ(MetricValue(after, bad_series), 1);
  EXPECT_EQ(MetricValue(after, "rope_request_duration_seconds_count{rpc=\"Rotate\"}"), 4);
  // Each OK call received and sent one 64-byte tensor plus framing.
  EXPECT_GT(MetricValue(after, "rope_received_bytes_total{rpc=\"Rotate\"}"), 4 * 64);
  EXPECT_GT(MetricValue(after, "rope_sent_bytes_total{rpc=\"Rotate\"}"), 3 * 64);
  EXPECT_EQ(MetricValue(after, "rope_table_cache_misses_total"), 1);
  EXPECT_EQ(MetricValue(after, "rope_table_cache_hits_total"), 2);
  EXPECT_EQ(MetricValue(after, "rope_table_cache_entries"), 1);
  EXPECT_EQ(MetricValue(after, "rope_table_cache_bytes"), 64 * 4 * 2 * 4);
  EXPECT_EQ(MetricValue(after, "rope_draining"), 0);
  EXPECT_EQ(MetricValue(after, "rope_max_concurrent_calls"), DefaultOptions().max_concurrent_calls);
  EXPECT_GE(MetricValue(after, "rope_calls_in_flight"), 0);
}

class NoEchoTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.enable_echo = false;
    StartServer(options);
  }
};

TEST_F(NoEchoTest, EchoIsNotServedWithoutTheFlag) {
  auto echo = bench::v1::EchoService::NewStub(channel_);
  bench::v1::EchoRequest request;
  bench::v1::EchoResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_TRUE(GrpcStatusIs(echo->Echo(&context, request, &response),
                           grpc::StatusCode::UNIMPLEMENTED, ""));
}

class MaxConnectionAgeTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.max_connection_age = absl::Milliseconds(300);
    StartServer(options);
  }
};

// The server ends aged connections (GOAWAY) so that clients re-resolve and
// reach new replicas; the client's channel leaves READY, and a later call
// simply reconnects.
TEST_F(MaxConnectionAgeTest, ServerClosesConnectionsAfterTheirAge) {
  v1::ServerInfo info;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                             grpc::StatusCode::OK, ""));
  }
  ASSERT_EQ(channel_->GetState(false), GRPC_CHANNEL_READY);
  EXPECT_TRUE(channel_->WaitForStateChange(GRPC_CHANNEL_READY,
                                           absl::ToChronoTime(absl::Now() + absl::Seconds(20))));
  EXPECT_NE(channel_->GetState(false), GRPC_CHANNEL_READY);
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_TRUE(GrpcStatusIs(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                           grpc::StatusCode::OK, ""));
}

}  // namespace
}  // namespace test
}  // namespace rope
