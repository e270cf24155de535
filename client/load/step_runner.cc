#include "client/load/step_runner.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/load/arrivals.h"
#include "client/load/call_driver.h"
#include "client/load/recorder.h"

namespace rope {
namespace load {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);
// Nested starts per thread before a worker's next request is handed to the
// main loop instead (gRPC may complete a failing call inline in Issue).
constexpr int kMaxNesting = 8;
constexpr int kMaxVerifyFailures = 5;

thread_local int tls_nesting = 0;

int64_t Nanos(absl::Time t) { return absl::ToUnixNanos(t); }

class StepRunner {
 public:
  StepRunner(const StepContext& context, const StepPlan& plan)
      : context_(context),
        spec_(*context.spec),
        plan_(plan),
        start_(absl::Now()),
        measure_start_(start_ + spec_.warmup),
        measure_end_(spec_.requests > 0 ? absl::InfiniteFuture()
                                         : measure_start_ + spec_.duration),
        recorder_(measure_start_, spec_.window, spec_.seed),
        driver_(NewCallDriver(context.pool, context.workload, StreamDeadline())),
        last_progress_ns_(Nanos(start_)) {
    result_.plan = plan;
    result_.verify.requested = context.verify_budget;
  }

  StepResult Run() {
    if (plan_.open_loop()) {
      RunOpenLoop();
    } else {
      for (int w = 0; w < plan_.concurrency; ++w) StartNext(w);
      while (!issuing_over_.load()) {
        WaitForDeferred(kPollInterval);
        Poll();
      }
    }
    Drain();
    const absl::Time issue_end =
        spec_.requests > 0 ? absl::FromUnixNanos(last_measured_issue_ns_.load()) : measure_end_;
    recorder_.Finish(std::max(issue_end, measure_start_), &result_);
    result_.issued = issued_measured_.load();
    result_.dropped = dropped_.load();
    result_.peak_in_flight = max_in_flight_.load();
    result_.stalled = stalled_;
    if (plan_.open_loop()) {
      result_.offered_rps =
          result_.issue_s > 0 ? static_cast<double>(result_.issued) / result_.issue_s : 0;
      result_.scheduled = scheduled_;
      // Judged against the arrivals the schedule drew (a Poisson count
      // varies around rps x duration), so it measures the client alone.
      result_.rate_reached = static_cast<double>(result_.issued) >= 0.95 * scheduled_;
      result_.schedule_lag_max_ms = static_cast<double>(max_lag_ns_) / 1e6;
    }
    EvaluateStability(spec_.stability_percent, &result_);
    if (context_.progress != nullptr) context_.progress->Clear();
    return std::move(result_);
  }

 private:
  absl::Duration StreamDeadline() const {
    if (!context_.workload->streaming()) return spec_.deadline;
    // A stream lives for the whole step.
    if (spec_.requests > 0) return absl::InfiniteDuration();
    return spec_.warmup + spec_.duration + spec_.deadline;
  }

  // ------------------------------------------------------------ issuing

  // Whether a request starting at `now` may be sent, counting it when it is
  // measured. Ends issuing when the step's measured part is over.
  bool Admit(absl::Time now) {
    if (issuing_over_.load()) return false;
    if (now < measure_start_) return true;  // warm-up
    if (now >= measure_end_) {
      issuing_over_.store(true);
      return false;
    }
    if (spec_.requests > 0) {
      int64_t n = issued_measured_.load();
      do {
        if (n >= spec_.requests) {
          issuing_over_.store(true);
          return false;
        }
      } while (!issued_measured_.compare_exchange_weak(n, n + 1));
      last_measured_issue_ns_.store(Nanos(now));
      if (n + 1 == spec_.requests) issuing_over_.store(true);
      return true;
    }
    issued_measured_.fetch_add(1);
    return true;
  }

  void Send(int lane, absl::Time start, int worker) {
    const int payload =
        static_cast<int>(next_payload_.fetch_add(1) % context_.workload->variants());
    outstanding_.fetch_add(1);
    const int64_t in_flight = in_flight_.fetch_add(1) + 1;
    int64_t seen = max_in_flight_.load();
    while (in_flight > seen && !max_in_flight_.compare_exchange_weak(seen, in_flight)) {
    }
    driver_->Issue(lane, payload, start,
                   [this, worker](const CallOutcome& outcome,
                                  const google::protobuf::Message* reply) {
                     OnDone(worker, outcome, reply);
                   });
  }

  // Closed loop: worker `w`'s next request.
  void StartNext(int w) {
    const absl::Time now = absl::Now();
    if (!Admit(now)) return;
    Send(w, now, w);
  }

  void OnDone(int worker, const CallOutcome& outcome, const google::protobuf::Message* reply) {
    in_flight_.fetch_sub(1);
    const int64_t ok_index = recorder_.Record(outcome);
    if (ok_index >= 0 && reply != nullptr) MaybeVerify(ok_index, outcome, *reply);
    last_progress_ns_.store(Nanos(absl::Now()));
    if (worker >= 0) {
      // After a failure the main loop issues the worker's next request.
      // Against a server that fails every call at once (one draining, or
      // gone), restarting inline would keep gRPC's callback threads busy
      // serialising requests bound to fail; those threads also read the
      // replies of the calls still in flight, which then go unread until
      // the server gives up on them (found by bench/drain.sh).
      if (outcome.code == absl::StatusCode::kOk && tls_nesting < kMaxNesting) {
        ++tls_nesting;
        StartNext(worker);
        --tls_nesting;
      } else {
        absl::MutexLock lock(&deferred_mu_);
        deferred_.push_back(worker);
      }
    }
    // Last: the main loop sees no request outstanding only once the worker
    // has issued its next one or stopped.
    outstanding_.fetch_sub(1);
  }

  void RunOpenLoop() {
    ArrivalSchedule schedule(plan_.rps, spec_.poisson, spec_.seed);
    const int lanes = context_.workload->streaming() ? context_.pool->size() : 1 << 20;
    bool behind = false;
    for (int64_t n = 0;; ++n) {
      const absl::Time arrival = start_ + schedule.Next();
      if (arrival >= measure_end_) break;
      if (spec_.requests > 0 && arrival >= measure_start_ &&
          issued_measured_.load() >= spec_.requests) {
        break;
      }
      if (arrival >= measure_start_) ++scheduled_;
      if (behind) continue;  // only counting what the schedule asked for
      absl::Time now = absl::Now();
      while (now < arrival) {
        absl::SleepFor(std::min(arrival - now, kPollInterval));
        Poll();
        now = absl::Now();
      }
      if (stalled_) break;
      if (now >= measure_end_) {
        // Fell behind past the end: the rest of the schedule is counted,
        // not sent, so that the shortfall shows.
        behind = true;
        if (spec_.requests > 0) break;
        continue;
      }
      max_lag_ns_ = std::max(max_lag_ns_, absl::ToInt64Nanoseconds(now - arrival));
      if (in_flight_.load() >= spec_.max_in_flight) {
        if (arrival >= measure_start_) dropped_.fetch_add(1);
        continue;
      }
      if (!Admit(arrival)) break;
      Send(static_cast<int>(n % lanes), arrival, /*worker=*/-1);
      if ((n & 63) == 0) Poll();
    }
    issuing_over_.store(true);
  }

  // ------------------------------------------------------------ main loop

  // Returns once a worker start is deferred to the main loop, or after
  // `timeout`.
  void WaitForDeferred(absl::Duration timeout) {
    absl::MutexLock lock(&deferred_mu_);
    auto has_deferred = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(deferred_mu_) {
      return !deferred_.empty();
    };
    deferred_mu_.AwaitWithTimeout(absl::Condition(&has_deferred), timeout);
  }

  // Progress, deferred worker starts, the stall watchdog, and the end of a
  // duration-bounded closed loop. Main thread only.
  void Poll() {
    const absl::Time now = absl::Now();
    std::vector<int> deferred;
    {
      absl::MutexLock lock(&deferred_mu_);
      deferred.swap(deferred_);
    }
    for (int w : deferred) {
      StartNext(w);
    }
    if (now >= measure_end_) issuing_over_.store(true);
    if (outstanding_.load() > 0 &&
        now - absl::FromUnixNanos(last_progress_ns_.load()) > spec_.deadline + absl::Seconds(1)) {
      stalled_ = true;
      issuing_over_.store(true);
      driver_->CancelAll();
      last_progress_ns_.store(Nanos(now));
    }
    if (context_.progress != nullptr) {
      double fraction;
      if (spec_.requests > 0) {
        fraction = static_cast<double>(issued_measured_.load()) /
                   static_cast<double>(spec_.requests);
      } else {
        fraction = absl::ToDoubleSeconds(now - start_) /
                   absl::ToDoubleSeconds(spec_.warmup + spec_.duration);
      }
      const std::string status =
          now < measure_start_
              ? std::string("warming up")
              : absl::StrFormat("%d ok  %d errors", recorder_.ok(), recorder_.errors());
      context_.progress->Update(fraction, context_.label, status);
    }
  }

  // Waits for every request in flight (and every stream) to finish.
  void Drain() {
    driver_->CloseStreams();
    const absl::Time give_up = absl::Now() + spec_.deadline + absl::Seconds(5);
    bool cancelled = false;
    for (;;) {
      Poll();  // runs deferred starts (they stop at Admit) and the watchdog
      if (outstanding_.load() == 0 && driver_->Live() == 0) break;
      if (absl::Now() >= give_up) {
        if (cancelled) break;
        driver_->CancelAll();
        stalled_ = true;
        cancelled = true;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    if (outstanding_.load() != 0 || driver_->Live() != 0) {
      // gRPC still holds callbacks into the driver: keep it alive.
      (void)driver_.release();
    }
  }

  // ------------------------------------------------------------ verify

  // Checks context_.verify_budget replies spread over the step: reply i is
  // due once the step is i/budget of the way through (by time or count).
  void MaybeVerify(int64_t ok_index, const CallOutcome& outcome,
                   const google::protobuf::Message& reply) {
    if (context_.verifier == nullptr) return;
    const int budget = context_.verify_budget;
    {
      absl::MutexLock lock(&verify_mu_);
      if (verify_claimed_ >= budget) return;
      bool due;
      if (spec_.requests > 0) {
        due = ok_index * budget >= static_cast<int64_t>(verify_claimed_) * spec_.requests;
      } else {
        due = (outcome.end - measure_start_) * budget >= spec_.duration * verify_claimed_;
      }
      if (!due) return;
      ++verify_claimed_;
    }
    absl::StatusOr<VerifyCheck> check = context_.verifier->Check(outcome.payload, reply);
    absl::MutexLock lock(&verify_mu_);
    VerifySummary& v = result_.verify;
    ++v.checked;
    if (!check.ok()) {
      if (static_cast<int>(v.failures.size()) < kMaxVerifyFailures) {
        v.failures.push_back(absl::StrCat("payload ", outcome.payload,
                                          ": the local engine refused the request: ",
                                          check.status().ToString()));
      }
      return;
    }
    v.max_abs_error = std::max(v.max_abs_error, check->max_abs_error);
    if (check->match) {
      ++v.matched;
    } else if (static_cast<int>(v.failures.size()) < kMaxVerifyFailures) {
      v.failures.push_back(absl::StrCat("payload ", outcome.payload, ": ", check->detail));
    }
  }

  const StepContext& context_;
  const LoadSpec& spec_;
  const StepPlan plan_;
  const absl::Time start_;
  const absl::Time measure_start_;
  const absl::Time measure_end_;  // InfiniteFuture in requests mode
  Recorder recorder_;
  std::unique_ptr<CallDriver> driver_;
  StepResult result_;

  std::atomic<bool> issuing_over_{false};
  std::atomic<int64_t> issued_measured_{0};
  std::atomic<int64_t> last_measured_issue_ns_{0};
  std::atomic<int64_t> next_payload_{0};
  std::atomic<int64_t> outstanding_{0};
  std::atomic<int64_t> dropped_{0};
  // Requests sent and not yet answered (outstanding_ also covers the
  // bookkeeping after an answer, for Drain).
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> max_in_flight_{0};
  std::atomic<int64_t> last_progress_ns_;
  int64_t max_lag_ns_ = 0;  // main thread only
  int64_t scheduled_ = 0;   // main thread only: measured arrivals drawn
  bool stalled_ = false;    // main thread only

  absl::Mutex deferred_mu_;
  std::vector<int> deferred_ ABSL_GUARDED_BY(deferred_mu_);

  absl::Mutex verify_mu_;
  int verify_claimed_ ABSL_GUARDED_BY(verify_mu_) = 0;
};

}  // namespace

StepResult RunStep(const StepContext& context, const StepPlan& plan) {
  StepRunner runner(context, plan);
  return runner.Run();
}

}  // namespace load
}  // namespace rope
