#include "client/load/recorder.h"

#include <algorithm>

namespace rope {
namespace load {
namespace {

// Windows past this many (a day at 1 s) share the last one: bounded memory.
constexpr int64_t kMaxWindows = 86400;

void Tally(const CallOutcome& outcome, std::map<absl::StatusCode, ErrorTally>* tallies) {
  ErrorTally& tally = (*tallies)[outcome.code];
  if (tally.count == 0) {
    tally.code = outcome.code;
    tally.first_message = outcome.message;
  }
  ++tally.count;
}

std::vector<ErrorTally> Sorted(const std::map<absl::StatusCode, ErrorTally>& tallies) {
  std::vector<ErrorTally> out;
  for (const auto& entry : tallies) out.push_back(entry.second);
  return out;
}

}  // namespace

Recorder::Recorder(absl::Time measure_start, absl::Duration window, uint64_t seed)
    : measure_start_(measure_start), window_(window), rng_(seed), last_end_(measure_start) {}

int64_t Recorder::Record(const CallOutcome& outcome) {
  absl::MutexLock lock(&mu_);
  const bool ok = outcome.code == absl::StatusCode::kOk;
  if (outcome.start < measure_start_) {
    if (ok) {
      ++warmup_ok_;
    } else {
      ++warmup_failed_;
      Tally(outcome, &warmup_errors_);
    }
    return -1;
  }
  last_end_ = std::max(last_end_, outcome.end);
  retries_ += outcome.retries;
  if (outcome.retries > 0) ++retried_calls_;
  int64_t w = (outcome.end - measure_start_) / window_;
  w = std::min(std::max<int64_t>(w, 0), kMaxWindows - 1);
  if (w >= static_cast<int64_t>(windows_.size())) windows_.resize(w + 1);
  if (!ok) {
    ++failed_;
    ++windows_[w].errors;
    Tally(outcome, &errors_);
    return -1;
  }
  const int64_t latency = absl::ToInt64Nanoseconds(outcome.end - outcome.start);
  const int64_t marshal = absl::ToInt64Nanoseconds(outcome.marshal);
  latency_.Record(latency);
  marshal_.Record(marshal);
  wait_.Record(std::max<int64_t>(0, latency - marshal));
  windows_[w].latency.Record(latency);
  ++windows_[w].ok;
  bytes_sent_ += outcome.bytes_sent;
  bytes_received_ += outcome.bytes_received;
  // Reservoir sampling (Algorithm R): every OK call is equally likely kept.
  const StepResult::Sample sample = {absl::ToDoubleSeconds(outcome.end - measure_start_),
                                     static_cast<double>(latency) / 1e6};
  if (static_cast<int64_t>(samples_.size()) < kMaxSamples) {
    samples_.push_back(sample);
  } else {
    const uint64_t j = rng_() % static_cast<uint64_t>(ok_ + 1);
    if (j < static_cast<uint64_t>(kMaxSamples)) samples_[j] = sample;
  }
  return ok_++;
}

int64_t Recorder::measured() const {
  absl::MutexLock lock(&mu_);
  return ok_ + failed_;
}

int64_t Recorder::ok() const {
  absl::MutexLock lock(&mu_);
  return ok_;
}

int64_t Recorder::errors() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void Recorder::Finish(absl::Time issue_end, StepResult* result) {
  absl::MutexLock lock(&mu_);
  result->ok = ok_;
  result->errors = failed_;
  result->warmup_ok = warmup_ok_;
  result->warmup_errors = warmup_failed_;
  result->retries = retries_;
  result->retried_calls = retried_calls_;
  result->measured_s = absl::ToDoubleSeconds(last_end_ - measure_start_);
  result->issue_s = std::max(0.0, absl::ToDoubleSeconds(issue_end - measure_start_));
  if (result->measured_s > 0) {
    result->rps = static_cast<double>(ok_) / result->measured_s;
    result->sent_mb_per_s = static_cast<double>(bytes_sent_) / 1e6 / result->measured_s;
    result->received_mb_per_s = static_cast<double>(bytes_received_) / 1e6 / result->measured_s;
  }
  result->latency = latency_;
  result->marshal = marshal_;
  result->wait = wait_;
  result->latency_summary = Summarize(latency_);
  result->marshal_summary = Summarize(marshal_);
  result->wait_summary = Summarize(wait_);
  result->errors_by_code = Sorted(errors_);
  result->warmup_errors_by_code = Sorted(warmup_errors_);
  const double window_s = absl::ToDoubleSeconds(window_);
  result->windows.clear();
  for (size_t i = 0; i < windows_.size(); ++i) {
    WindowStats w;
    w.start_s = window_s * static_cast<double>(i);
    w.end_s = w.start_s + window_s;
    w.ok = windows_[i].ok;
    w.errors = windows_[i].errors;
    w.rps = static_cast<double>(w.ok) / window_s;
    w.latency = Summarize(windows_[i].latency);
    w.complete = measure_start_ + window_ * static_cast<double>(i + 1) <= issue_end;
    result->windows.push_back(w);
  }
  std::sort(samples_.begin(), samples_.end(),
            [](const StepResult::Sample& a, const StepResult::Sample& b) { return a.t_s < b.t_s; });
  result->samples = samples_;
}

}  // namespace load
}  // namespace rope
