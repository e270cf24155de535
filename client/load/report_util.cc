// Helpers shared by the report renderings.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "client/load/report.h"

namespace rope {
namespace load {

std::vector<LatencyBin> LogBins(const LatencyHistogram& histogram, int bins) {
  std::vector<LatencyBin> out;
  if (histogram.count() == 0 || bins < 1) return out;
  const double lo = std::max<double>(1, static_cast<double>(histogram.min()));
  const double hi = std::max<double>(lo, static_cast<double>(histogram.max()));
  if (hi <= lo * 1.0001) {
    out.push_back({lo / 1e6, hi / 1e6, histogram.count()});
    return out;
  }
  const double log_lo = std::log(lo);
  const double step = (std::log(hi) - log_lo) / bins;
  out.resize(bins);
  for (int i = 0; i < bins; ++i) {
    out[i].lower_ms = std::exp(log_lo + step * i) / 1e6;
    out[i].upper_ms = std::exp(log_lo + step * (i + 1)) / 1e6;
  }
  histogram.ForEachBucket([&](int64_t lower, int64_t upper, int64_t count) {
    const double mid = std::min(hi, std::max(lo, 0.5 * static_cast<double>(lower + upper - 1)));
    int i = static_cast<int>((std::log(mid) - log_lo) / step);
    i = std::min(bins - 1, std::max(0, i));
    out[i].count += count;
  });
  return out;
}

std::string DescribePlan(const StepPlan& plan, bool poisson) {
  if (plan.open_loop()) {
    return absl::StrFormat("open loop, %g req/s (%s arrivals)", plan.rps,
                           poisson ? "poisson" : "constant");
  }
  return absl::StrFormat("closed loop, concurrency %d", plan.concurrency);
}

}  // namespace load
}  // namespace rope
