// ClientShare: a per-client limit on things held at once: calls in flight
// (--max_calls_per_client), so that one client flooding the server cannot
// take every slot of --max_concurrent_calls from the others (fairness), or
// open streams (--max_streams_per_client, stream_limits.h).
//
// A client is named by a short identity string (caller_identity.h: its
// bearer token's fingerprint, else its certificate's subject, else its peer
// address). Each may hold at most `max_per_client` at once; one more is
// refused at once with RESOURCE_EXHAUSTED naming the limit, while other
// clients keep being admitted. CallGate asks this first, then counts the
// call against the global limit.
//
// Thread-safe.
#ifndef ROPE_SERVICE_CLIENT_SHARE_H_
#define ROPE_SERVICE_CLIENT_SHARE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace rope {

class ClientShare {
 public:
  // `max_per_client` <= 0: no per-client limit. Refusals say what is
  // counted (`held`: "calls in flight") and name the limit as `flag`.
  explicit ClientShare(int64_t max_per_client, std::string held = "calls in flight",
                       std::string flag = "max_calls_per_client");
  ClientShare(const ClientShare&) = delete;
  ClientShare& operator=(const ClientShare&) = delete;

  // OK: `client` now holds one more and must Release() it. Otherwise
  // RESOURCE_EXHAUSTED naming the client, its count and the limit; nothing
  // is held. An empty `client` is never limited.
  absl::Status TryAcquire(absl::string_view client);
  void Release(absl::string_view client);

  int64_t in_flight(absl::string_view client) const;
  int64_t max_per_client() const { return max_per_client_; }

 private:
  const int64_t max_per_client_;
  const std::string held_;
  const std::string flag_;
  mutable absl::Mutex mu_;
  // Only clients with calls in flight are kept.
  absl::flat_hash_map<std::string, int64_t> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rope

#endif  // ROPE_SERVICE_CLIENT_SHARE_H_
