// RenderHtml: one self-contained page (inline CSS and SVG, no scripts, no
// external resources) with the run's tables and charts.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/load/report.h"
#include "client/load/svg_chart.h"

namespace rope {
namespace load {
namespace {

constexpr int kHistogramBins = 60;
constexpr char kBlue[] = "#1f77b4";
constexpr char kOrange[] = "#ff7f0e";
constexpr char kGreen[] = "#2ca02c";
constexpr char kGrey[] = "#9aa5b1";

constexpr char kStyle[] = R"(
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; } td.l, th.l { text-align: left; }
.bad { color: #b00020; font-weight: bold; } .ok { color: #106010; }
.meta td { text-align: left; } svg { display: block; margin: 10px 0; }
)";

std::string E(absl::string_view text) { return EscapeXml(text); }
std::string F(double v, int digits = 3) { return absl::StrFormat("%.*f", digits, v); }

std::string LoadLabel(const StepPlan& plan) {
  return plan.open_loop() ? absl::StrFormat("%g rps", plan.rps)
                          : absl::StrFormat("c=%d", plan.concurrency);
}

std::string HistogramChart(const StepResult& s) {
  Chart chart;
  chart.title = absl::StrCat("Latency histogram (", LoadLabel(s.plan), ", ", s.ok, " OK calls)");
  chart.x = {"latency (ms, log scale)", /*log=*/true, false};
  chart.y = {"calls", false, true};
  for (const LatencyBin& b : LogBins(s.latency, kHistogramBins)) {
    chart.bars.push_back({b.lower_ms, b.upper_ms, static_cast<double>(b.count)});
  }
  // Quantile markers as thin vertical series.
  int64_t top = 0;
  for (const ChartBar& b : chart.bars) top = std::max<int64_t>(top, static_cast<int64_t>(b.y));
  const struct {
    const char* name;
    double ms;
    const char* color;
  } marks[] = {{"p50", s.latency_summary.p50_ms, kGreen},
               {"p99", s.latency_summary.p99_ms, kOrange},
               {"p99.9", s.latency_summary.p999_ms, "#d62728"}};
  for (const auto& m : marks) {
    ChartSeries line;
    line.name = absl::StrCat(m.name, " ", F(m.ms), " ms");
    line.color = m.color;
    line.points = {{m.ms, 0, ""}, {m.ms, static_cast<double>(top), ""}};
    chart.series.push_back(std::move(line));
  }
  return RenderSvg(chart);
}

std::string TimelineChart(const StepResult& s) {
  Chart chart;
  chart.title = absl::StrCat("Latency over time (", LoadLabel(s.plan), ")");
  chart.x = {"seconds since measurement start", false, true};
  chart.y = {"latency (ms, log scale)", true, false};
  ChartSeries samples{"sampled calls", kGrey, ChartSeries::Style::kPoints, {}};
  for (const StepResult::Sample& p : s.samples) samples.points.push_back({p.t_s, p.latency_ms, ""});
  ChartSeries p50{"window p50", kGreen, ChartSeries::Style::kLineAndPoints, {}};
  ChartSeries p99{"window p99", kOrange, ChartSeries::Style::kLineAndPoints, {}};
  for (const WindowStats& w : s.windows) {
    if (w.latency.count == 0 || !w.complete) continue;
    const double mid = (w.start_s + w.end_s) / 2;
    p50.points.push_back({mid, w.latency.p50_ms, ""});
    p99.points.push_back({mid, w.latency.p99_ms, ""});
  }
  chart.series = {samples, p50, p99};
  return RenderSvg(chart);
}

std::string ThroughputChart(const StepResult& s) {
  Chart chart;
  chart.title = absl::StrCat("Throughput per complete window (", LoadLabel(s.plan), ")");
  chart.x = {"seconds since measurement start", false, true};
  chart.y = {"OK requests / s", false, true};
  // Incomplete windows (the drain after the last send) would read low.
  ChartSeries errors{"errors / s", "#d62728", ChartSeries::Style::kLineAndPoints, {}};
  for (const WindowStats& w : s.windows) {
    if (!w.complete) continue;
    chart.bars.push_back({w.start_s, w.end_s, w.rps});
    errors.points.push_back({(w.start_s + w.end_s) / 2,
                             static_cast<double>(w.errors) / (w.end_s - w.start_s), ""});
  }
  chart.series = {errors};
  return RenderSvg(chart);
}

std::string SweepCharts(const RunReport& report) {
  std::string out;
  Chart chart;
  chart.title = "Throughput vs latency";
  chart.x = {"achieved throughput (OK requests / s)", false, true};
  // Log scale: p50, p99 and an SLO line often differ by 10x or more.
  chart.y = {"latency (ms, log scale)", true, false};
  ChartSeries p50{"p50", kGreen, ChartSeries::Style::kLineAndPoints, {}};
  ChartSeries p99{"p99", kOrange, ChartSeries::Style::kLineAndPoints, {}};
  for (const StepResult& s : report.steps) {
    if (s.latency_summary.count == 0) continue;
    p50.points.push_back({s.rps, s.latency_summary.p50_ms, LoadLabel(s.plan)});
    p99.points.push_back({s.rps, s.latency_summary.p99_ms, ""});
  }
  chart.series = {p50, p99};
  if (report.spec.max_p99 > absl::ZeroDuration() && !p99.points.empty()) {
    ChartSeries slo{"max p99 (SLO)", "#d62728", ChartSeries::Style::kLine, {}};
    const double ms = absl::ToDoubleMilliseconds(report.spec.max_p99);
    double lo = p99.points.front().x, hi = lo;
    for (const ChartPoint& p : p99.points) {
      lo = std::min(lo, p.x);
      hi = std::max(hi, p.x);
    }
    slo.points = {{lo, ms, ""}, {hi, ms, ""}};
    chart.series.push_back(slo);
  }
  out += RenderSvg(chart);

  Chart by_load;
  const bool open = report.steps[0].plan.open_loop();
  by_load.title = open ? "Achieved vs offered rate" : "Throughput vs concurrency";
  by_load.x = {open ? "target rate (requests / s)" : "concurrency", false, true};
  by_load.y = {"OK requests / s", false, true};
  ChartSeries achieved{"achieved", kBlue, ChartSeries::Style::kLineAndPoints, {}};
  ChartSeries target{"target", kGrey, ChartSeries::Style::kLine, {}};
  for (const StepResult& s : report.steps) {
    const double x = open ? s.plan.rps : s.plan.concurrency;
    achieved.points.push_back({x, s.rps, ""});
    if (open) target.points.push_back({x, s.plan.rps, ""});
  }
  by_load.series = {achieved};
  if (open) by_load.series.push_back(target);
  out += RenderSvg(by_load);
  return out;
}

void AppendStepTable(const RunReport& report, std::string* out) {
  *out +=
      "<table><tr><th class=\"l\">load</th><th>OK</th><th>errors</th><th>req/s</th>"
      "<th>MB/s sent</th><th>MB/s recv</th><th>min</th><th>p50</th><th>p90</th><th>p95</th>"
      "<th>p99</th><th>p99.9</th><th>max</th><th>mean</th><th>stddev</th>"
      "<th>marshal mean</th><th>wait mean</th><th class=\"l\">stable</th></tr>\n";
  for (const StepResult& s : report.steps) {
    const LatencySummary& l = s.latency_summary;
    absl::StrAppend(
        out, "<tr><td class=\"l\">", E(DescribePlan(s.plan, report.spec.poisson)), "</td><td>",
        s.ok, "</td><td", s.errors > 0 ? " class=\"bad\"" : "", ">", s.errors, "</td><td>",
        F(s.rps, 1), "</td><td>", F(s.sent_mb_per_s, 2), "</td><td>", F(s.received_mb_per_s, 2),
        "</td><td>", F(l.min_ms), "</td><td>", F(l.p50_ms), "</td><td>", F(l.p90_ms),
        "</td><td>", F(l.p95_ms), "</td><td>", F(l.p99_ms), "</td><td>", F(l.p999_ms),
        "</td><td>", F(l.max_ms), "</td><td>", F(l.mean_ms), "</td><td>", F(l.stddev_ms),
        "</td><td>", F(s.marshal_summary.mean_ms), "</td><td>", F(s.wait_summary.mean_ms),
        "</td><td class=\"l ", s.stable ? "ok" : "bad", "\">", s.stable ? "yes" : "no",
        "</td></tr>\n");
  }
  *out += "</table>\n<p>Latencies in milliseconds. MB = 10<sup>6</sup> bytes.</p>\n";
}

void AppendStepDetails(const RunReport& report, const StepResult& s, std::string* out) {
  absl::StrAppend(out, "<h3>", E(DescribePlan(s.plan, report.spec.poisson)), "</h3>\n<p>",
                  E(s.stability), "</p>\n");
  if (s.plan.open_loop()) {
    absl::StrAppend(out, "<p class=\"", s.rate_reached ? "ok" : "bad", "\">Offered ",
                    F(s.offered_rps, 1), " req/s (target ", absl::StrFormat("%g", s.plan.rps),
                    "): sent ", s.issued, " of ", s.scheduled, " scheduled arrivals, ",
                    s.rate_reached ? "rate reached" : "target rate NOT reached",
                    " (", s.dropped, " arrivals dropped, max send lag ",
                    F(s.schedule_lag_max_ms), " ms).</p>\n");
  }
  if (s.stalled) {
    *out += "<p class=\"bad\">Stalled: no reply for longer than the deadline; calls in flight "
            "were cancelled.</p>\n";
  }
  if (!s.errors_by_code.empty()) {
    *out += "<table><tr><th class=\"l\">code</th><th>count</th><th class=\"l\">first message"
            "</th></tr>\n";
    for (const ErrorTally& e : s.errors_by_code) {
      absl::StrAppend(out, "<tr><td class=\"l\">", E(absl::StatusCodeToString(e.code)),
                      "</td><td>", e.count, "</td><td class=\"l\">", E(e.first_message),
                      "</td></tr>\n");
    }
    *out += "</table>\n";
  }
  if (s.latency_summary.count > 0) {
    *out += HistogramChart(s);
    *out += TimelineChart(s);
  }
  bool any_complete = false;
  for (const WindowStats& w : s.windows) any_complete = any_complete || w.complete;
  if (any_complete) *out += ThroughputChart(s);
}

}  // namespace

std::string RenderHtml(const RunReport& report) {
  const LoadSpec& spec = report.spec;
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>ropeload: ",
      E(report.workload), " against ", E(report.target), "</title>\n<style>", kStyle,
      "</style>\n</head>\n<body>\n<h1>ropeload: ", E(report.workload), " against ",
      E(report.target), "</h1>\n");
  absl::StrAppend(
      &out, "<table class=\"meta\">\n<tr><th class=\"l\">server</th><td>", E(report.server),
      "</td></tr>\n<tr><th class=\"l\">config</th><td>", E(report.config),
      "</td></tr>\n<tr><th class=\"l\">payload</th><td>", E(report.payload), " (request ",
      report.request_bytes, " bytes)</td></tr>\n<tr><th class=\"l\">connections</th><td>",
      spec.connections, "</td></tr>\n<tr><th class=\"l\">each step</th><td>",
      spec.requests > 0 ? absl::StrCat(spec.requests, " requests")
                        : E(absl::FormatDuration(spec.duration)),
      " after ", E(absl::FormatDuration(spec.warmup)), " of warm-up; windows of ",
      E(absl::FormatDuration(spec.window)), "; stable when the last 3 windows are within +-",
      absl::StrFormat("%g", spec.stability_percent), "%</td></tr>\n</table>\n");

  out += "<h2>Summary</h2>\n";
  AppendStepTable(report, &out);
  if (!report.slo_note.empty()) absl::StrAppend(&out, "<p>SLO: ", E(report.slo_note), "</p>\n");
  if (report.verify.requested > 0) {
    absl::StrAppend(&out, "<p class=\"",
                    report.verify.matched == report.verify.checked ? "ok" : "bad",
                    "\">Verify: ", report.verify.matched, " of ", report.verify.checked,
                    " checked replies match the local CPU engine (max abs error ",
                    absl::StrFormat("%.3g", report.verify.max_abs_error), ").</p>\n");
    for (const std::string& f : report.verify.failures) {
      absl::StrAppend(&out, "<p class=\"bad\">", E(f), "</p>\n");
    }
  }
  if (report.steps.size() > 1) {
    out += "<h2>Sweep</h2>\n";
    out += SweepCharts(report);
  }
  out += "<h2>Steps</h2>\n";
  for (const StepResult& s : report.steps) AppendStepDetails(report, s, &out);
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace load
}  // namespace rope
