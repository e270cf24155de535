// The report renderings of a synthetic run, and the chart helpers.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/load/report.h"
#include "client/load/svg_chart.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace load {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

StepResult SyntheticStep(int concurrency, int64_t base_ns) {
  StepResult s;
  s.plan.concurrency = concurrency;
  for (int i = 0; i < 1000; ++i) s.latency.Record(base_ns + i * 1000);
  s.latency_summary = Summarize(s.latency);
  s.ok = 1000;
  s.errors = 2;
  s.errors_by_code.push_back({absl::StatusCode::kInvalidArgument, 2, "q.shape <bad> & \"odd\""});
  s.measured_s = 1;
  s.rps = 1000;
  for (int w = 0; w < 4; ++w) {
    WindowStats window;
    window.start_s = w * 0.25;
    window.end_s = window.start_s + 0.25;
    window.ok = 250;
    window.rps = 1000;
    window.latency = s.latency_summary;
    window.complete = w < 3;
    s.windows.push_back(window);
  }
  s.samples = {{0.1, 1.0}, {0.5, 1.2}};
  EvaluateStability(10, &s);
  return s;
}

RunReport SyntheticSweep() {
  RunReport r;
  r.target = "127.0.0.1:1234";
  r.workload = "Rotate";
  r.config = "theta=10000 head_dim=64";
  r.payload = "q float32 [1,16,8,64]";
  r.spec.steps = {{1, 0}, {2, 0}};
  r.spec.sweep = true;
  r.steps = {SyntheticStep(1, 500000), SyntheticStep(2, 900000)};
  return r;
}

TEST(ReportTest, HtmlIsSelfContainedWithCharts) {
  const std::string html = RenderHtml(SyntheticSweep());
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, HasSubstr("Throughput vs latency"));
  EXPECT_THAT(html, HasSubstr("Latency histogram"));
  EXPECT_THAT(html, HasSubstr("Latency over time"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  // Server text is escaped.
  EXPECT_THAT(html, HasSubstr("q.shape &lt;bad&gt; &amp; &quot;odd&quot;"));
}

TEST(ReportTest, CsvHasAHeaderAndOneRowPerStep) {
  const std::string csv = RenderCsv(SyntheticSweep());
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  const size_t columns = std::vector<std::string>(absl::StrSplit(lines[0], ',')).size();
  for (const std::string& line : lines) {
    EXPECT_EQ(std::vector<std::string>(absl::StrSplit(line, ',')).size(), columns) << line;
  }
  EXPECT_THAT(lines[1], testing::StartsWith("0,closed,1,"));
}

TEST(ReportTest, TextShowsTheSweepTableAndErrors) {
  const std::string text = RenderText(SyntheticSweep());
  EXPECT_THAT(text, HasSubstr("Sweep:"));
  EXPECT_THAT(text, HasSubstr("c=2"));
  EXPECT_THAT(text, HasSubstr("INVALID_ARGUMENT"));
}

TEST(ReportTest, JsonNamesItsSchemaAndSteps) {
  const std::string json = RenderJson(SyntheticSweep());
  EXPECT_THAT(json, HasSubstr("\"schema\": \"ropeload/1\""));
  EXPECT_THAT(json, HasSubstr("\"p999\": "));
  EXPECT_THAT(json, HasSubstr("\"code\": \"INVALID_ARGUMENT\""));
}

TEST(LogBinsTest, BinsCoverTheRangeAndKeepEveryCount) {
  LatencyHistogram h;
  for (int i = 1; i <= 10000; ++i) h.Record(i * 1000);
  const std::vector<LatencyBin> bins = LogBins(h, 20);
  ASSERT_EQ(bins.size(), 20u);
  int64_t total = 0;
  for (const LatencyBin& b : bins) total += b.count;
  EXPECT_EQ(total, h.count());
  EXPECT_NEAR(bins.front().lower_ms, 0.001, 1e-9);
  EXPECT_NEAR(bins.back().upper_ms, 10.0, 1e-9);
}

TEST(SvgChartTest, NiceTicks) {
  EXPECT_THAT(NiceTicks(0, 10, false), ElementsAre(0, 2, 4, 6, 8, 10));
  EXPECT_THAT(NiceTicks(0.1, 10, true), ElementsAre(0.1, 0.2, 0.5, 1, 2, 5, 10));
  EXPECT_THAT(NiceTicks(1, 1e6, true), ElementsAre(1, 10, 100, 1000, 1e4, 1e5, 1e6));
  EXPECT_TRUE(NiceTicks(5, 5, false).empty());
}

TEST(SvgChartTest, EmptyChartStillRenders) {
  Chart chart;
  chart.title = "empty <chart>";
  const std::string svg = RenderSvg(chart);
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("empty &lt;chart&gt;"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

}  // namespace
}  // namespace load
}  // namespace rope
