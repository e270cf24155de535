// Recorder: collects the outcomes of one step's calls, from any thread,
// into the StepResult's histograms, windows, error tallies and samples.
//
// A call belongs to the warm-up when it started before the measurement
// start (it is then only counted), else to the window in which it ended.
//
// Thread-safe.
#ifndef ROPE_CLIENT_LOAD_RECORDER_H_
#define ROPE_CLIENT_LOAD_RECORDER_H_

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/load/call_driver.h"
#include "client/load/step_result.h"

namespace rope {
namespace load {

class Recorder {
 public:
  static constexpr int kMaxSamples = 2000;

  Recorder(absl::Time measure_start, absl::Duration window, uint64_t seed);

  // Records one outcome. Returns the index of this OK measured call among
  // the OK measured calls (0, 1, ...), or -1 for warm-up calls and errors.
  int64_t Record(const CallOutcome& outcome);

  // OK + failed measured calls recorded so far, and OK ones.
  int64_t measured() const;
  int64_t ok() const;
  int64_t errors() const;

  // Moves the measurements into `result`: histograms, summaries, windows
  // (those ending after `issue_end` are marked incomplete), errors, byte
  // rates, samples, measured_s. Call once, after the last Record.
  void Finish(absl::Time issue_end, StepResult* result);

 private:
  struct Window {
    LatencyHistogram latency;
    int64_t ok = 0;
    int64_t errors = 0;
  };

  const absl::Time measure_start_;
  const absl::Duration window_;
  mutable absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram latency_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram marshal_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram wait_ ABSL_GUARDED_BY(mu_);
  std::vector<Window> windows_ ABSL_GUARDED_BY(mu_);
  std::map<absl::StatusCode, ErrorTally> errors_ ABSL_GUARDED_BY(mu_);
  std::map<absl::StatusCode, ErrorTally> warmup_errors_ ABSL_GUARDED_BY(mu_);
  int64_t ok_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t warmup_ok_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t warmup_failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t retried_calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_end_ ABSL_GUARDED_BY(mu_);
  std::vector<StepResult::Sample> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_RECORDER_H_
