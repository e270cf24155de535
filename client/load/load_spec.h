// LoadSpec: what one ropeload invocation does (target, load shape, steps,
// measurement and outputs), independent of how it was spelled on the command
// line (load_flags.h builds it from flags).
#ifndef ROPE_CLIENT_LOAD_LOAD_SPEC_H_
#define ROPE_CLIENT_LOAD_LOAD_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/channel_security.h"

namespace rope {
namespace load {

// One measured run: a closed loop of `concurrency` workers (rps == 0), or an
// open loop at `rps` requests per second.
struct StepPlan {
  int concurrency = 1;
  double rps = 0;
  bool open_loop() const { return rps > 0; }
};

struct LoadSpec {
  std::string target;
  int connections = 1;                  // channels, each with its own connection
  absl::Duration deadline = absl::Seconds(30);  // per call (per stream: see runner)
  client::ChannelSecurityFiles security;  // TLS, mutual TLS, bearer token

  std::vector<StepPlan> steps;          // one, or a sweep
  bool sweep = false;
  bool poisson = false;                 // open loop: Poisson arrivals, else constant gaps
  int max_in_flight = 1000;             // open loop: arrivals beyond it are dropped
  uint64_t seed = 0;                    // Poisson arrivals and sampling

  absl::Duration duration = absl::Seconds(10);  // per step, when requests == 0
  int64_t requests = 0;                 // > 0: measured requests per step
  absl::Duration warmup = absl::ZeroDuration();  // per step, before measuring
  absl::Duration window = absl::Seconds(1);      // measurement window
  double stability_percent = 10;        // the last 3 windows within +-this % of their mean

  absl::Duration max_p99 = absl::ZeroDuration();  // > 0: a sweep stops past it
  int verify = 0;                       // replies checked against the local CPU engine
  bool progress = true;                 // a progress bar, when stderr is a terminal

  std::string json_path, csv_path, html_path;

  // Failed calls over measured calls (all steps) above this make ropeload
  // exit kExitErrorRate; 0: any failed call does.
  double max_error_rate = 0;
  // Attempts per call (RopeClient's retry policy: UNAVAILABLE is retried on
  // another address); 1: never retried, every failure counted.
  int max_attempts = 1;
};

// Sweep ranges, perf_analyzer style: "a:b:step" (a, a+step, ... <= b),
// "a:b:xN" (a, a*N, ... <= b), "a:b" (step 1) or "a". Values must be > 0,
// a <= b, step > 0, N > 1, and there are at most kMaxSweepSteps of them.
// INVALID_ARGUMENT naming the text otherwise.
inline constexpr int kMaxSweepSteps = 64;
absl::StatusOr<std::vector<double>> ParseRange(absl::string_view text);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_LOAD_SPEC_H_
