// The scale-out test reads shares from Prometheus text; these pin the parts
// of the parsing it depends on (tests/support/metrics_scrape.h).
#include "tests/support/metrics_scrape.h"
#include "tests/support/server_process.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace test {
namespace {

using ::testing::HasSubstr;

constexpr char kPage[] =
    "# HELP rope_requests_total Finished requests by method and grpc status code.\n"
    "# TYPE rope_requests_total counter\n"
    "rope_requests_total{code=\"OK\",rpc=\"Rotate\"} 42\n"
    "rope_requests_total{code=\"UNAVAILABLE\",rpc=\"Rotate\"} 3\n"
    "rope_requests_total{code=\"OK\",rpc=\"RotateStream\"} 7\n"
    "rope_calls_in_flight 1\n";

TEST(SampleValueTest, PicksTheLineWithEveryLabel) {
  absl::StatusOr<double> ok =
      SampleValue(kPage, "rope_requests_total", {{"rpc", "Rotate"}, {"code", "OK"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, 42);
  absl::StatusOr<double> stream =
      SampleValue(kPage, "rope_requests_total", {{"rpc", "RotateStream"}, {"code", "OK"}});
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(*stream, 7);
}

TEST(SampleValueTest, AbsentSampleIsZero) {
  absl::StatusOr<double> value =
      SampleValue(kPage, "rope_requests_total", {{"rpc", "GetTable"}, {"code", "OK"}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 0);
}

TEST(SampleValueTest, SeveralMatchesAreInvalidArgument) {
  absl::StatusOr<double> value = SampleValue(kPage, "rope_requests_total", {{"rpc", "Rotate"}});
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(value.status().message(), HasSubstr("2 samples of rope_requests_total"));
}

TEST(SampleValueTest, NonNumericValueIsInvalidArgument) {
  absl::StatusOr<double> value =
      SampleValue("m{a=\"b\"} many\n", "m", {{"a", "b"}});
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(value.status().message(), HasSubstr("\"many\" is not a number"));
}

TEST(HttpGetTest, NothingListeningIsUnavailable) {
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  absl::StatusOr<std::string> page = HttpGet(*port, "/metrics", absl::Seconds(5));
  EXPECT_EQ(page.status().code(), absl::StatusCode::kUnavailable) << page.status();
}

}  // namespace
}  // namespace test
}  // namespace rope
