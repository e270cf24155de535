// SendWatch: a deadline for sending replies. A reply armed here that has not
// been written `timeout` later has its `expire` callback run: the service
// cancels the call with it, and gRPC then ends the call, so that its
// reactor returns the bytes (and, for a stream message, the slot) it held.
// A client that never reads (an HTTP/2 window left at 0) would otherwise
// keep a large reply's bytes charged to the byte budget until its
// connection aged out, refusing every other client's large calls meanwhile.
//
// One thread, woken for the earliest deadline; every reply has the same
// timeout, so the tickets, handed out in order, expire in order. Thread-safe.
// No gRPC here: the callback does the cancelling. Nothing in it is about
// replies but the name: a second one times idle streams (stream_limits.h).
#ifndef ROPE_SERVICE_SEND_WATCH_H_
#define ROPE_SERVICE_SEND_WATCH_H_

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rope {

class SendWatch {
 public:
  using Ticket = uint64_t;  // 0: nothing armed

  // `timeout` > 0; InfiniteDuration(): off (no thread; Arm does nothing).
  explicit SendWatch(absl::Duration timeout);
  // Stops the thread; callbacks still armed never run.
  ~SendWatch();
  SendWatch(const SendWatch&) = delete;
  SendWatch& operator=(const SendWatch&) = delete;

  // Runs `expire` on the watch's thread `timeout` from now unless
  // Disarm(ticket) comes first. Returns 0 (and drops `expire`) when off.
  Ticket Arm(absl::AnyInvocable<void() &&> expire);

  // Once it returns, the ticket's `expire` will not start and is not
  // running, unless Disarm is called from within it (on the watch's
  // thread), which returns at once. 0 and unknown tickets: nothing to do.
  void Disarm(Ticket ticket);

  absl::Duration timeout() const { return timeout_; }
  // Callbacks started so far.
  int64_t expired() const;

 private:
  struct Armed {
    absl::Time deadline;
    absl::AnyInvocable<void() &&> expire;
  };

  void Run();

  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  std::map<Ticket, Armed> armed_ ABSL_GUARDED_BY(mu_);  // in deadline order
  Ticket next_ ABSL_GUARDED_BY(mu_) = 1;
  Ticket firing_ ABSL_GUARDED_BY(mu_) = 0;  // whose callback runs now
  int64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace rope

#endif  // ROPE_SERVICE_SEND_WATCH_H_
