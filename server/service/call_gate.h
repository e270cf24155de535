// CallGate: admission control shared by every RPC of one server.
//
// Counts calls in flight across all methods (a stream counts as one call
// while a message of it is being served), refuses calls beyond the limit promptly instead of queueing
// them, and refuses every new call once draining has begun. With a per-client
// share (client_share.h), a client over its share is refused while the
// others are still admitted. Refusals are
// logged, rate-limited (refusal_log.h).
//
// Thread-safe.
#ifndef ROPE_SERVICE_CALL_GATE_H_
#define ROPE_SERVICE_CALL_GATE_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/strings/string_view.h"
#include "server/service/client_share.h"
#include "server/service/refusal_log.h"

namespace rope {

// The status of a call refused because the server is draining.
absl::Status DrainingError();

class CallGate {
 public:
  // `max_in_flight` <= 0 means no limit; `max_per_client` <= 0: no
  // per-client share.
  explicit CallGate(int64_t max_in_flight, int64_t max_per_client = 0);
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // OK: the caller now holds one slot and must call Leave() exactly once.
  // UNAVAILABLE ("server is draining") after BeginDrain(); RESOURCE_EXHAUSTED
  // naming the limit when max_in_flight calls are already in flight. The
  // caller holds nothing on error.
  // `client` (caller_identity.h; empty: not limited per client) is checked
  // against its share first: RESOURCE_EXHAUSTED naming max_calls_per_client.
  // Leave() must name the same client.
  absl::Status TryEnter(absl::string_view client = "");
  void Leave(absl::string_view client = "");

  // From now on TryEnter() refuses. Calls already admitted continue.
  void BeginDrain();
  bool draining() const;

  // Blocks until no call is in flight or `deadline` passes; true when idle.
  bool WaitForIdle(absl::Time deadline);

  int64_t in_flight() const;
  int64_t max_in_flight() const { return max_in_flight_; }
  int64_t max_per_client() const { return share_.max_per_client(); }
  int64_t in_flight_of(absl::string_view client) const { return share_.in_flight(client); }

 private:
  const int64_t max_in_flight_;
  ClientShare share_;
  RefusalLog refusals_;
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rope

#endif  // ROPE_SERVICE_CALL_GATE_H_
