// Recorder: warm-up exclusion, windows by completion time, error tallies,
// and the derived rates; Progress: drawn only on a terminal.
#include "client/load/recorder.h"

#include <cstdio>

#include "absl/time/time.h"
#include "client/load/progress.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace load {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1000);

CallOutcome Ok(double start_s, double end_s, double marshal_ms = 0.1) {
  CallOutcome o;
  o.start = kStart + absl::Seconds(start_s);
  o.end = kStart + absl::Seconds(end_s);
  o.marshal = absl::Milliseconds(marshal_ms);
  o.bytes_sent = 1000;
  o.bytes_received = 2000;
  return o;
}

CallOutcome Failed(double start_s, absl::StatusCode code, const char* message) {
  CallOutcome o = Ok(start_s, start_s + 0.001);
  o.code = code;
  o.message = message;
  return o;
}

TEST(RecorderTest, WarmupCallsAreCountedApartAndNotMeasured) {
  Recorder r(kStart, absl::Seconds(1), 0);
  EXPECT_EQ(r.Record(Ok(-0.5, 0.2)), -1);  // started during warm-up, ended after
  EXPECT_EQ(r.Record(Failed(-0.2, absl::StatusCode::kUnavailable, "x")), -1);
  EXPECT_EQ(r.Record(Ok(0.1, 0.3)), 0);
  EXPECT_EQ(r.Record(Ok(0.2, 0.4)), 1);
  StepResult result;
  r.Finish(kStart + absl::Seconds(1), &result);
  EXPECT_EQ(result.ok, 2);
  EXPECT_EQ(result.errors, 0);
  EXPECT_EQ(result.warmup_ok, 1);
  EXPECT_EQ(result.warmup_errors, 1);
  ASSERT_EQ(result.warmup_errors_by_code.size(), 1u);
  EXPECT_EQ(result.warmup_errors_by_code[0].code, absl::StatusCode::kUnavailable);
  EXPECT_EQ(result.latency.count(), 2);
}

TEST(RecorderTest, CallsFallInTheWindowWhereTheyEnd) {
  Recorder r(kStart, absl::Milliseconds(500), 0);
  r.Record(Ok(0.0, 0.1));
  r.Record(Ok(0.4, 0.6));   // ends in window 1
  r.Record(Ok(0.9, 1.05));  // ends in window 2, after issuing stopped at 1.0 s
  StepResult result;
  r.Finish(kStart + absl::Seconds(1), &result);
  ASSERT_EQ(result.windows.size(), 3u);
  EXPECT_EQ(result.windows[0].ok, 1);
  EXPECT_EQ(result.windows[1].ok, 1);
  EXPECT_EQ(result.windows[2].ok, 1);
  EXPECT_TRUE(result.windows[0].complete);
  EXPECT_TRUE(result.windows[1].complete);
  EXPECT_FALSE(result.windows[2].complete);
  EXPECT_DOUBLE_EQ(result.windows[0].rps, 2.0);
  EXPECT_NEAR(result.measured_s, 1.05, 1e-9);
  EXPECT_NEAR(result.rps, 3 / 1.05, 1e-9);
  EXPECT_NEAR(result.sent_mb_per_s, 3000 / 1e6 / 1.05, 1e-12);
  EXPECT_NEAR(result.received_mb_per_s, 6000 / 1e6 / 1.05, 1e-12);
}

TEST(RecorderTest, ErrorsAreTalliedByCodeWithTheFirstMessage) {
  Recorder r(kStart, absl::Seconds(1), 0);
  r.Record(Failed(0.1, absl::StatusCode::kInvalidArgument, "first"));
  r.Record(Failed(0.2, absl::StatusCode::kInvalidArgument, "second"));
  r.Record(Failed(0.3, absl::StatusCode::kOutOfRange, "range"));
  r.Record(Ok(0.3, 0.4));
  StepResult result;
  r.Finish(kStart + absl::Seconds(1), &result);
  EXPECT_EQ(result.errors, 3);
  EXPECT_EQ(result.ok, 1);
  ASSERT_EQ(result.errors_by_code.size(), 2u);
  EXPECT_EQ(result.errors_by_code[0].code, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.errors_by_code[0].count, 2);
  EXPECT_EQ(result.errors_by_code[0].first_message, "first");
  EXPECT_EQ(result.errors_by_code[1].code, absl::StatusCode::kOutOfRange);
  EXPECT_EQ(result.windows[0].errors, 3);
}

TEST(RecorderTest, WaitIsLatencyMinusMarshal) {
  Recorder r(kStart, absl::Seconds(1), 0);
  r.Record(Ok(0.0, 0.010, /*marshal_ms=*/2));
  StepResult result;
  r.Finish(kStart + absl::Seconds(1), &result);
  EXPECT_NEAR(result.latency_summary.mean_ms, 10, 1e-6);
  EXPECT_NEAR(result.marshal_summary.mean_ms, 2, 1e-6);
  EXPECT_NEAR(result.wait_summary.mean_ms, 8, 1e-6);
}

TEST(RecorderTest, SamplesAreBoundedAndSortedByTime) {
  Recorder r(kStart, absl::Seconds(1), 3);
  for (int i = 0; i < 3 * Recorder::kMaxSamples; ++i) {
    r.Record(Ok(i * 1e-4, i * 1e-4 + 1e-3));
  }
  StepResult result;
  r.Finish(kStart + absl::Seconds(1), &result);
  ASSERT_EQ(result.samples.size(), static_cast<size_t>(Recorder::kMaxSamples));
  for (size_t i = 1; i < result.samples.size(); ++i) {
    ASSERT_LE(result.samples[i - 1].t_s, result.samples[i].t_s);
  }
}

TEST(ProgressTest, NothingIsDrawnWhenTheStreamIsNotATerminal) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  {
    Progress progress(file, /*enabled=*/true);
    EXPECT_FALSE(progress.active());
    progress.Update(0.5, "c=1", "10 ok");
  }
  EXPECT_EQ(std::ftell(file), 0);
  std::fclose(file);
}

TEST(ProgressTest, BarShowsTheFraction) {
  EXPECT_EQ(ProgressBar(0.5, 10), "[#####.....]  50%");
  EXPECT_EQ(ProgressBar(2, 4), "[####] 100%");
  EXPECT_THAT(ProgressBar(-1, 4), HasSubstr("[....]   0%"));
}

}  // namespace
}  // namespace load
}  // namespace rope
