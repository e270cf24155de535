// RenderText: the terminal summary, in the manner of ghz's.
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/load/report.h"

namespace rope {
namespace load {
namespace {

constexpr int kBarWidth = 40;
constexpr int kDistributionBins = 10;

std::string Ms(double ms) {
  if (ms >= 100) return absl::StrFormat("%.1f", ms);
  if (ms >= 1) return absl::StrFormat("%.2f", ms);
  return absl::StrFormat("%.3f", ms);
}

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  if (bytes >= 1024) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%d B", bytes);
}

void AppendStep(const RunReport& report, const StepResult& s, std::string* out) {
  const LatencySummary& l = s.latency_summary;
  const int64_t total = s.ok + s.errors;
  absl::StrAppendFormat(out, "  requests    %d ok, %d errors", s.ok, s.errors);
  if (total > 0 && s.errors > 0) {
    absl::StrAppendFormat(out, " (%.2f%%)", 100.0 * s.errors / total);
  }
  if (s.dropped > 0) absl::StrAppendFormat(out, ", %d arrivals dropped (max in flight)", s.dropped);
  if (report.spec.max_attempts > 1) {
    absl::StrAppendFormat(out, "; %d retries (%d calls retried, --max_attempts=%d)", s.retries,
                          s.retried_calls, report.spec.max_attempts);
  }
  if (s.warmup_ok + s.warmup_errors > 0) {
    absl::StrAppendFormat(out, "; warm-up %d ok, %d errors (not counted)", s.warmup_ok,
                          s.warmup_errors);
  }
  absl::StrAppend(out, "\n");
  absl::StrAppendFormat(out, "  throughput  %.1f req/s over %.2f s   sent %.2f MB/s   received %.2f MB/s\n",
                        s.rps, s.measured_s, s.sent_mb_per_s, s.received_mb_per_s);
  if (s.plan.open_loop()) {
    absl::StrAppendFormat(out,
                          "  offered     %.1f req/s (target %g): sent %d of %d scheduled "
                          "arrivals, %s (max send lag %s ms)\n",
                          s.offered_rps, s.plan.rps, s.issued, s.scheduled,
                          s.rate_reached ? "rate reached" : "TARGET RATE NOT REACHED",
                          Ms(s.schedule_lag_max_ms));
  }
  if (l.count > 0) {
    absl::StrAppend(out, "  latency ms  min ", Ms(l.min_ms), "  p50 ", Ms(l.p50_ms), "  p90 ",
                    Ms(l.p90_ms), "  p95 ", Ms(l.p95_ms), "  p99 ", Ms(l.p99_ms), "  p99.9 ",
                    Ms(l.p999_ms), "  max ", Ms(l.max_ms), "\n");
    absl::StrAppend(out, "              mean ", Ms(l.mean_ms), "  stddev ", Ms(l.stddev_ms), "\n");
    const double share = l.mean_ms > 0 ? 100 * s.marshal_summary.mean_ms / l.mean_ms : 0;
    absl::StrAppend(out, "  client      marshal mean ", Ms(s.marshal_summary.mean_ms), " ms (",
                    absl::StrFormat("%.1f", share), "% of latency), wait mean ",
                    Ms(s.wait_summary.mean_ms), " ms, p99 ", Ms(s.wait_summary.p99_ms), " ms\n");
  }
  absl::StrAppend(out, "  stability   ", s.stability, "\n");
  if (s.stalled) {
    absl::StrAppend(out, "  STALLED     no reply for longer than the deadline: calls in flight "
                         "were cancelled\n");
  }
  for (const ErrorTally& e : s.errors_by_code) {
    absl::StrAppendFormat(out, "  error       %-20s %8d  first: %s\n",
                          absl::StatusCodeToString(e.code), e.count, e.first_message);
  }
  if (s.verify.requested > 0) {
    absl::StrAppendFormat(out, "  verify      %d of %d checked replies match the local engine "
                               "(max abs error %.3g)\n",
                          s.verify.matched, s.verify.checked, s.verify.max_abs_error);
    for (const std::string& f : s.verify.failures) absl::StrAppend(out, "    ", f, "\n");
  }
}

void AppendDistribution(const StepResult& s, std::string* out) {
  const std::vector<LatencyBin> bins = LogBins(s.latency, kDistributionBins);
  if (bins.empty()) return;
  int64_t most = 1;
  for (const LatencyBin& b : bins) most = std::max(most, b.count);
  absl::StrAppend(out, "\nLatency distribution (ms, log-spaced bins):\n");
  for (const LatencyBin& b : bins) {
    const int width = static_cast<int>(static_cast<double>(b.count) * kBarWidth / most);
    absl::StrAppendFormat(out, "  %9s - %-9s %8d |%s\n", Ms(b.lower_ms), Ms(b.upper_ms),
                          b.count, std::string(width, '#'));
  }
}

void AppendWindows(const StepResult& s, std::string* out) {
  if (s.windows.empty()) return;
  absl::StrAppend(out, "\nMeasurement windows:\n",
                  "     start_s     ok  errors      req/s   mean_ms    p50_ms    p99_ms\n");
  for (const WindowStats& w : s.windows) {
    absl::StrAppendFormat(out, "  %10.2f %6d %7d %10.1f %9s %9s %9s%s\n", w.start_s, w.ok,
                          w.errors, w.rps, Ms(w.latency.mean_ms), Ms(w.latency.p50_ms),
                          Ms(w.latency.p99_ms), w.complete ? "" : "  (partial)");
  }
}

}  // namespace

std::string RenderText(const RunReport& report) {
  const LoadSpec& spec = report.spec;
  std::string out = absl::StrCat("ropeload  ", report.workload, " -> ", report.target, "  (",
                                 spec.connections, spec.connections == 1 ? " connection" : " connections",
                                 ")\n");
  if (!report.server.empty()) absl::StrAppend(&out, "  server      ", report.server, "\n");
  absl::StrAppend(&out, "  config      ", report.config, "\n");
  absl::StrAppend(&out, "  payload     ", report.payload, "; request ",
                  Bytes(report.request_bytes), "\n");
  absl::StrAppend(&out, "  run         ",
                  spec.requests > 0 ? absl::StrCat(spec.requests, " requests")
                                    : absl::FormatDuration(spec.duration),
                  " per step", spec.warmup > absl::ZeroDuration()
                                   ? absl::StrCat(" after ", absl::FormatDuration(spec.warmup),
                                                  " of warm-up")
                                   : "",
                  ", windows of ", absl::FormatDuration(spec.window), "\n");

  if (report.steps.size() == 1) {
    const StepResult& s = report.steps[0];
    absl::StrAppend(&out, "  load        ", DescribePlan(s.plan, spec.poisson), "\n\nSummary:\n");
    AppendStep(report, s, &out);
    AppendDistribution(s, &out);
    AppendWindows(s, &out);
  } else {
    absl::StrAppend(&out, "\nSweep:\n",
                    "  load                 req/s   p50_ms   p90_ms   p99_ms   max_ms   errors  "
                    "stable\n");
    for (const StepResult& s : report.steps) {
      const std::string load = s.plan.open_loop() ? absl::StrFormat("rps %g", s.plan.rps)
                                                  : absl::StrFormat("c=%d", s.plan.concurrency);
      absl::StrAppendFormat(&out, "  %-14s %11.1f %8s %8s %8s %8s %8d  %s%s\n", load, s.rps,
                            Ms(s.latency_summary.p50_ms), Ms(s.latency_summary.p90_ms),
                            Ms(s.latency_summary.p99_ms), Ms(s.latency_summary.max_ms), s.errors,
                            s.stable ? "yes" : "no",
                            s.plan.open_loop() && !s.rate_reached ? "  (rate not reached)" : "");
    }
    for (const StepResult& s : report.steps) {
      absl::StrAppend(&out, "\n", DescribePlan(s.plan, spec.poisson), ":\n");
      AppendStep(report, s, &out);
    }
  }
  if (!report.slo_note.empty()) absl::StrAppend(&out, "\nSLO: ", report.slo_note, "\n");
  absl::StrAppendFormat(
      &out, "\nErrors: %d of %d measured calls failed (%.3f%%); --max_error_rate=%g: %s\n",
      report.failed_calls, report.calls,
      report.calls > 0 ? 100.0 * report.failed_calls / report.calls : 0.0, spec.max_error_rate,
      report.error_rate_exceeded ? "EXCEEDED (exit 3)" : "within");
  if (report.verify.requested > 0 && report.steps.size() > 1) {
    absl::StrAppendFormat(&out, "\nVerify: %d of %d checked replies match the local engine\n",
                          report.verify.matched, report.verify.checked);
  }
  return out;
}

}  // namespace load
}  // namespace rope
