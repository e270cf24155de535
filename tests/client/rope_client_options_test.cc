// RopeClient pieces that need no server: option checks, the service config
// (round_robin + UNAVAILABLE retry), and the grpc::Status conversion.
#include <memory>
#include <string>

#include "client/client_options.h"
#include "client/grpc_status.h"
#include "client/rope_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace client {
namespace {

using ::testing::HasSubstr;

TEST(GrpcStatusTest, KeepsEveryCodeAndMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    absl::Status status =
        FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(code), "q.shape[3] is 7"));
    EXPECT_EQ(static_cast<int>(status.code()), code);
    EXPECT_EQ(status.message(), "q.shape[3] is 7");
  }
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "x")).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(GrpcStatusTest, UnknownCodeBecomesUnknownWithTheNumber) {
  // 20 is no gRPC code but within grpc::StatusCode's range of values (-32..31,
  // from its enumerators -1..16); a cast of a number outside that range is
  // undefined behaviour, which UBSan (scripts/sanitize.sh) reports.
  absl::Status status = FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "odd"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(std::string(status.message()), HasSubstr("grpc status code 20: odd"));
}

TEST(ClientOptionsTest, RejectsNonPositiveDeadline) {
  ClientOptions options;
  options.deadline = absl::ZeroDuration();
  absl::Status status = ValidateClientOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("ClientOptions.deadline is 0"));
}

TEST(ClientOptionsTest, RejectsBadPolicyName) {
  ClientOptions options;
  options.load_balancing_policy = "round robin\"}";
  absl::Status status = ValidateClientOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("load_balancing_policy"));
}

TEST(RopeClientCreateTest, RejectsEmptyTargetAndBadOptions) {
  absl::StatusOr<std::unique_ptr<RopeClient>> empty = RopeClient::Create("", ClientOptions());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("target is empty"));
  ClientOptions options;
  options.retry_max_attempts = 0;
  absl::StatusOr<std::unique_ptr<RopeClient>> bad = RopeClient::Create("localhost:1", options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("retry_max_attempts is 0"));
}

TEST(ServiceConfigTest, HasRoundRobinAndUnavailableRetry) {
  const std::string json = ServiceConfigJson(ClientOptions());
  EXPECT_THAT(json, HasSubstr(R"("loadBalancingConfig":[{"round_robin":{}}])"));
  EXPECT_THAT(json, HasSubstr(R"("service":"rope.v1.RopeService")"));
  EXPECT_THAT(json, HasSubstr(R"("maxAttempts":5)"));
  EXPECT_THAT(json, HasSubstr(R"("initialBackoff":"0.100s")"));
  EXPECT_THAT(json, HasSubstr(R"("maxBackoff":"1.000s")"));
  EXPECT_THAT(json, HasSubstr(R"("retryableStatusCodes":["UNAVAILABLE"])"));
  ClientOptions no_retry;
  no_retry.retry_max_attempts = 1;
  EXPECT_THAT(ServiceConfigJson(no_retry), ::testing::Not(HasSubstr("retryPolicy")));
}

TEST(ServiceConfigTest, FormatsBackoffAsSeconds) {
  ClientOptions options;
  options.retry_initial_backoff = absl::Milliseconds(100);
  options.retry_max_backoff = absl::Seconds(2);
  const std::string json = ServiceConfigJson(options);
  EXPECT_THAT(json, HasSubstr(R"("initialBackoff":"0.100s")"));
  EXPECT_THAT(json, HasSubstr(R"("maxBackoff":"2.000s")"));
}

}  // namespace
}  // namespace client
}  // namespace rope
