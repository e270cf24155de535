// Interrupt: why a long computation should stop before it is done — the
// caller went away, or its deadline passed. Backends poll it between
// independent pieces of work, so a cancelled AttentionScores frees its
// threads instead of finishing work nobody will read.
//
// Thread-safe to poll from many threads, as long as `cancelled` is.
#ifndef ROPE_ENGINE_INTERRUPT_H_
#define ROPE_ENGINE_INTERRUPT_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rope {

class Interrupt {
 public:
  // `cancelled` (may be null) reports whether the caller has gone;
  // `deadline` is when its answer stops being useful.
  Interrupt(std::function<bool()> cancelled, absl::Time deadline)
      : cancelled_(std::move(cancelled)), deadline_(deadline) {}

  // OK to go on; CANCELLED or DEADLINE_EXCEEDED (naming `what`) to stop.
  absl::Status Check(const char* what) const {
    if (cancelled_ && cancelled_()) {
      return absl::CancelledError(
          std::string(what) + " stopped: the caller cancelled the call (or went away)");
    }
    if (absl::Now() > deadline_) {
      return absl::DeadlineExceededError(std::string(what) +
                                         " stopped: the caller's deadline passed");
    }
    return absl::OkStatus();
  }

 private:
  const std::function<bool()> cancelled_;
  const absl::Time deadline_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_INTERRUPT_H_
