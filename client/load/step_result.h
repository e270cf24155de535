// The measurements of one step (one load level) and of a whole ropeload
// run, as the reports see them.
#ifndef ROPE_CLIENT_LOAD_STEP_RESULT_H_
#define ROPE_CLIENT_LOAD_STEP_RESULT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/load/latency_histogram.h"
#include "client/load/load_spec.h"

namespace rope {
namespace load {

// Quantiles and moments of a histogram, in milliseconds.
struct LatencySummary {
  int64_t count = 0;
  double min_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
  double mean_ms = 0, stddev_ms = 0;
};
LatencySummary Summarize(const LatencyHistogram& histogram);

struct ErrorTally {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  int64_t count = 0;
  std::string first_message;
};

struct WindowStats {
  double start_s = 0, end_s = 0;  // from the start of measurement
  int64_t ok = 0, errors = 0;
  double rps = 0;                 // ok / window length
  LatencySummary latency;
  bool complete = false;          // the window lies wholly within the issuing period
};

struct VerifySummary {
  int requested = 0;
  int checked = 0;
  int matched = 0;
  double max_abs_error = 0;
  std::vector<std::string> failures;  // first few mismatches or oracle errors
};

struct StepResult {
  StepPlan plan;

  double measured_s = 0;     // start of measurement to the last measured completion
  double issue_s = 0;        // start of measurement to the end of issuing
  int64_t issued = 0;        // measured requests sent
  int64_t ok = 0;
  int64_t errors = 0;
  int64_t dropped = 0;       // open loop: arrivals skipped at max_in_flight
  int64_t peak_in_flight = 0;  // most requests in flight at once (sent, not answered)
  // gRPC's retries of measured calls (--max_attempts > 1) as the servers
  // reported them: extra attempts, and calls that needed at least one.
  int64_t retries = 0;
  int64_t retried_calls = 0;
  int64_t warmup_ok = 0;
  int64_t warmup_errors = 0;
  bool stalled = false;      // calls were cancelled after no progress for a deadline

  double rps = 0;            // ok / measured_s
  int64_t scheduled = 0;     // open loop: measured arrivals the schedule drew
  double offered_rps = 0;    // open loop: issued / issue_s
  bool rate_reached = true;  // open loop: at least 95% of the scheduled arrivals were sent
  double schedule_lag_max_ms = 0;  // open loop: latest send behind its arrival time
  double sent_mb_per_s = 0;  // request bytes of OK calls / measured_s (MB = 1e6 bytes)
  double received_mb_per_s = 0;

  LatencyHistogram latency;  // OK calls: end - start
  LatencyHistogram marshal;  // OK calls: client serialise + parse
  LatencyHistogram wait;     // OK calls: latency - marshal
  LatencySummary latency_summary, marshal_summary, wait_summary;

  std::vector<ErrorTally> errors_by_code;  // ascending code
  std::vector<ErrorTally> warmup_errors_by_code;
  std::vector<WindowStats> windows;
  bool stable = false;
  std::string stability;     // why (not) stable, in words

  struct Sample {
    double t_s;
    double latency_ms;
  };
  std::vector<Sample> samples;  // a uniform random sample of OK calls, for plots

  VerifySummary verify;
};

// The stability rule of perf_analyzer: with at least 3 complete windows, the
// last 3 have throughput and mean latency each within +-percent of the
// three's average. Sets result->stable and result->stability.
void EvaluateStability(double percent, StepResult* result);

struct RunReport {
  std::string target;
  std::string workload;        // RPC name
  std::string config;          // DescribeConfig
  std::string payload;         // Workload::payload_description
  int64_t request_bytes = 0;
  std::string server;          // "ropeserve 0.1.0, backend cpu (...)"
  LoadSpec spec;
  std::vector<StepResult> steps;
  bool slo_stopped = false;    // a sweep stopped at --max_p99
  std::string slo_note;
  VerifySummary verify;        // over all steps
  // Measured calls (all steps) and the failed ones; errors / calls against
  // spec.max_error_rate.
  int64_t calls = 0;
  int64_t failed_calls = 0;
  bool error_rate_exceeded = false;
};

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_STEP_RESULT_H_
