// The renderings of a RunReport: the terminal summary, JSON, CSV and a
// self-contained HTML page with SVG charts. Each is a pure function of the
// report.
//
// JSON ("schema": "ropeload/1"): top-level target, server, workload{rpc,
// config, payload, request_bytes}, load{mode, arrivals, connections,
// duration_s, requests, warmup_s, window_s, ...}, steps[], slo, verify.
// Each step: concurrency / target_rps, counts (issued, ok, errors, dropped,
// warmup), rps, offered_rps, rate_reached, MB/s, latency_ms / marshal_ms /
// wait_ms {count, min, p50, p90, p95, p99, p999, max, mean, stddev},
// errors_by_code[{code, code_number, count, first_message}], windows[],
// stable, stability, histogram[{lower_ms, upper_ms, count}], verify.
#ifndef ROPE_CLIENT_LOAD_REPORT_H_
#define ROPE_CLIENT_LOAD_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/load/latency_histogram.h"
#include "client/load/step_result.h"

namespace rope {
namespace load {

std::string RenderText(const RunReport& report);
std::string RenderJson(const RunReport& report);
std::string RenderCsv(const RunReport& report);
std::string RenderHtml(const RunReport& report);

// A histogram regrouped into at most `bins` bins of equal width on a log
// scale between its min and max (one bin when they are equal), for charts.
struct LatencyBin {
  double lower_ms = 0;
  double upper_ms = 0;
  int64_t count = 0;
};
std::vector<LatencyBin> LogBins(const LatencyHistogram& histogram, int bins);

// "closed loop, concurrency 8" / "open loop, 50 req/s (poisson)".
std::string DescribePlan(const StepPlan& plan, bool poisson);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_REPORT_H_
