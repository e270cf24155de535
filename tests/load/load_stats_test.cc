// Arrival schedules, sweep ranges, the stability rule and the JSON writer.
#include <cmath>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/load/arrivals.h"
#include "client/load/json_writer.h"
#include "client/load/load_spec.h"
#include "client/load/step_result.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace load {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ArrivalScheduleTest, ConstantRateHasEqualGapsFromZero) {
  ArrivalSchedule schedule(50, /*poisson=*/false, 0);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(schedule.Next(), absl::Seconds(i / 50.0)) << "arrival " << i;
  }
}

TEST(ArrivalScheduleTest, PoissonGapsAverageOneOverRate) {
  ArrivalSchedule schedule(200, /*poisson=*/true, 42);
  const int n = 20000;
  absl::Duration last;
  double sum_sq = 0;
  absl::Duration previous = absl::ZeroDuration();
  for (int i = 0; i < n; ++i) {
    last = schedule.Next();
    const double gap = absl::ToDoubleSeconds(last - previous);
    ASSERT_GE(gap, 0);
    sum_sq += gap * gap;
    previous = last;
  }
  const double mean = absl::ToDoubleSeconds(last) / n;
  EXPECT_NEAR(mean, 1.0 / 200, 0.05 / 200);  // 20000 draws: ~0.7% standard error
  // Exponential: the standard deviation equals the mean.
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), mean, 0.05 * mean);
}

TEST(ArrivalScheduleTest, PoissonIsReproducibleFromItsSeed) {
  ArrivalSchedule a(100, true, 9), b(100, true, 9), c(100, true, 10);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const absl::Duration x = a.Next();
    ASSERT_EQ(x, b.Next());
    differs = differs || x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(ParseRangeTest, AcceptsStepsFactorsAndSingleValues) {
  EXPECT_THAT(*ParseRange("1:4:1"), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(*ParseRange("1:64:x2"), ElementsAre(1, 2, 4, 8, 16, 32, 64));
  EXPECT_THAT(*ParseRange("2:9:3"), ElementsAre(2, 5, 8));
  EXPECT_THAT(*ParseRange("1:3"), ElementsAre(1, 2, 3));
  EXPECT_THAT(*ParseRange("8"), ElementsAre(8));
  std::vector<double> tenths = *ParseRange("0.1:0.3:0.1");
  EXPECT_EQ(tenths.size(), 3u);
}

TEST(ParseRangeTest, RejectsMalformedRanges) {
  for (const char* bad : {"", "0:4", "4:1", "1:4:0", "1:4:x1", "a:b", "1:2:3:4", "1:4:-1",
                          "1:100000:1"}) {
    absl::StatusOr<std::vector<double>> r = ParseRange(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("range")) << bad;
  }
}

WindowStats Window(double rps, double mean_ms, bool complete = true) {
  WindowStats w;
  w.rps = rps;
  w.latency.mean_ms = mean_ms;
  w.complete = complete;
  return w;
}

TEST(StabilityTest, LastThreeWindowsWithinTenPercentAreStable) {
  StepResult r;
  r.windows = {Window(10, 9), Window(100, 1.0), Window(105, 1.05), Window(95, 0.97),
               Window(3, 1, /*complete=*/false)};
  EvaluateStability(10, &r);
  EXPECT_TRUE(r.stable) << r.stability;
  EXPECT_THAT(r.stability, HasSubstr("stable: last 3 windows"));
}

TEST(StabilityTest, ThroughputOutsideTheBandIsNotStable) {
  StepResult r;
  r.windows = {Window(100, 1), Window(130, 1), Window(100, 1)};
  EvaluateStability(10, &r);
  EXPECT_FALSE(r.stable);
  EXPECT_THAT(r.stability, HasSubstr("not stable"));
}

TEST(StabilityTest, LatencyOutsideTheBandIsNotStable) {
  StepResult r;
  r.windows = {Window(100, 1), Window(100, 1.5), Window(100, 1)};
  EvaluateStability(10, &r);
  EXPECT_FALSE(r.stable);
}

TEST(StabilityTest, FewerThanThreeCompleteWindowsIsNotStable) {
  StepResult r;
  r.windows = {Window(100, 1), Window(100, 1), Window(100, 1, /*complete=*/false)};
  EvaluateStability(10, &r);
  EXPECT_FALSE(r.stable);
  EXPECT_THAT(r.stability, HasSubstr("2 complete measurement window(s)"));
}

TEST(JsonWriterTest, EscapesStringsAndWritesNullForNonFinite) {
  JsonWriter json;
  json.BeginObject();
  json.Field("text", "a\"b\\c\nd\x01");
  json.Field("nan", std::nan(""));
  json.Field("inf", HUGE_VAL);
  json.Field("n", int64_t{-3});
  json.Key("list").BeginArray().Int(1).Double(0.5).Bool(false).Null().EndArray();
  json.Key("empty").BeginObject().EndObject();
  json.EndObject();
  EXPECT_EQ(json.str(),
            "{\n  \"text\": \"a\\\"b\\\\c\\nd\\u0001\",\n  \"nan\": null,\n  \"inf\": null,\n"
            "  \"n\": -3,\n  \"list\": [\n    1,\n    0.5,\n    false,\n    null\n  ],\n"
            "  \"empty\": {}\n}");
}

}  // namespace
}  // namespace load
}  // namespace rope
