#include "client/load/step_result.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace rope {
namespace load {
namespace {

double Ms(int64_t nanos) { return static_cast<double>(nanos) / 1e6; }

// Largest |x - mean| / mean of the values, in percent; 0 for a zero mean.
double SpreadPercent(const double* v, int n, double* mean) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += v[i];
  *mean = sum / n;
  if (*mean == 0) return 0;
  double worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, std::fabs(v[i] - *mean) / *mean);
  return 100 * worst;
}

}  // namespace

LatencySummary Summarize(const LatencyHistogram& h) {
  LatencySummary s;
  s.count = h.count();
  if (s.count == 0) return s;
  s.min_ms = Ms(h.min());
  s.p50_ms = Ms(h.ValueAtQuantile(0.50));
  s.p90_ms = Ms(h.ValueAtQuantile(0.90));
  s.p95_ms = Ms(h.ValueAtQuantile(0.95));
  s.p99_ms = Ms(h.ValueAtQuantile(0.99));
  s.p999_ms = Ms(h.ValueAtQuantile(0.999));
  s.max_ms = Ms(h.max());
  s.mean_ms = h.mean() / 1e6;
  s.stddev_ms = h.stddev() / 1e6;
  return s;
}

void EvaluateStability(double percent, StepResult* result) {
  std::vector<const WindowStats*> complete;
  for (const WindowStats& w : result->windows) {
    if (w.complete) complete.push_back(&w);
  }
  if (complete.size() < 3) {
    result->stable = false;
    result->stability = absl::StrFormat(
        "not stable: %d complete measurement window(s), the rule needs 3 (run longer or use "
        "a shorter --window)",
        static_cast<int>(complete.size()));
    return;
  }
  double rps[3], mean[3];
  for (int i = 0; i < 3; ++i) {
    const WindowStats* w = complete[complete.size() - 3 + i];
    rps[i] = w->rps;
    mean[i] = w->latency.mean_ms;
  }
  double rps_avg = 0, mean_avg = 0;
  const double rps_spread = SpreadPercent(rps, 3, &rps_avg);
  const double mean_spread = SpreadPercent(mean, 3, &mean_avg);
  result->stable = rps_spread <= percent && mean_spread <= percent;
  result->stability = absl::StrFormat(
      "%s: last 3 windows: throughput %.1f req/s +-%.1f%%, mean latency %.3f ms +-%.1f%% "
      "(limit +-%g%%)",
      result->stable ? "stable" : "not stable", rps_avg, rps_spread, mean_avg, mean_spread,
      percent);
}

}  // namespace load
}  // namespace rope
