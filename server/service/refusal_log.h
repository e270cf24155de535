// RefusalLog: one stderr line per kind of refused call, rate-limited.
//
// Refusals (a full gate, a draining server, a missing or wrong token) are
// counted in metrics, but an operator reading the log of a misbehaving
// replica should see them too, without a flood of identical lines under
// load. Each kind (a short key, e.g. "RESOURCE_EXHAUSTED") is written at
// once the first time, then at most once per `interval`; the line after a
// quiet interval says how many of that kind were left out since the last one.
//
// Thread-safe.
#ifndef ROPE_SERVICE_REFUSAL_LOG_H_
#define ROPE_SERVICE_REFUSAL_LOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rope {

class RefusalLog {
 public:
  using Sink = std::function<void(const std::string& line)>;
  using Clock = std::function<absl::Time()>;

  // Writes to stderr ("ropeserve: refused ...") on the real clock.
  explicit RefusalLog(absl::Duration interval = absl::Seconds(5));
  // For tests: lines go to `sink`, time comes from `clock`.
  RefusalLog(absl::Duration interval, Sink sink, Clock clock);
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;

  // Notes one refused call of kind `kind` with the reason given to the
  // caller; writes a line when this kind's interval has passed.
  void Note(absl::string_view kind, absl::string_view reason);

 private:
  struct Kind {
    absl::Time last_written = absl::InfinitePast();
    int64_t left_out = 0;
  };

  const absl::Duration interval_;
  const Sink sink_;
  const Clock clock_;
  absl::Mutex mu_;
  std::map<std::string, Kind, std::less<>> kinds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rope

#endif  // ROPE_SERVICE_REFUSAL_LOG_H_
