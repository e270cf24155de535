// StreamLimits: what bounds the streams a server keeps open between their
// messages (RotateStream, ModelStreamInfer: admitted_stream.h), beside the
// per-connection cap (--max_streams_per_connection). An idle stream holds no
// call slot and no bytes of the budget, but it still costs a gRPC call, its
// reactor and an HTTP/2 stream; so:
//   - open streams per client across all its connections
//     (--max_streams_per_client; the client as caller_identity.h names it
//     for shares): one more is refused at open with RESOURCE_EXHAUSTED
//     naming the client's count and the flag; other clients are not
//     affected. Counted from the stream's open until its status is sent
//     (released just before Finish, as unary calls leave the gate: a client
//     that has a stream's trailers may open the next one at once);
//   - an idle timeout (--stream_idle_timeout): a stream with no message being
//     served and none arriving for that long is finished by the server with
//     UNAVAILABLE naming the flag.
//
// UNAVAILABLE because it tells the client the truth and the right action: no
// message of the stream was lost or half-served (the stream is finished only
// between messages), and a new stream will be served. gRPC's own
// connection-level limits end idle or aged transports the same way: a
// client's calls on a connection closed by max_connection_age(+grace) or a
// failed keepalive end UNAVAILABLE, and grpcio's and tritonclient's retry
// logic treats UNAVAILABLE (only) as transient. DEADLINE_EXCEEDED would
// blame the client's own deadline, CANCELLED reads as the client's own
// cancellation, and RESOURCE_EXHAUSTED asks the client to back off though
// nothing is short.
//
// Refusals at open are logged on stderr like the gate's (refusal_log.h: one
// line per kind, rate-limited); an idle stream's end is normal, not logged.
//
// StreamLimits is server-wide (owned by the server, thread-safe); a
// StreamHold is one stream's part in it.
#ifndef ROPE_SERVICE_STREAM_LIMITS_H_
#define ROPE_SERVICE_STREAM_LIMITS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/service/client_share.h"
#include "server/service/refusal_log.h"
#include "server/service/send_watch.h"

namespace rope {

class StreamLimits {
 public:
  // `max_per_client` <= 0: no per-client count. `idle_timeout`
  // InfiniteDuration(): no idle timeout (else > 0). `tokens_verified`: as
  // CallerIdentity takes it.
  StreamLimits(int64_t max_per_client, absl::Duration idle_timeout, bool tokens_verified);
  StreamLimits(const StreamLimits&) = delete;
  StreamLimits& operator=(const StreamLimits&) = delete;

  int64_t max_per_client() const { return open_.max_per_client(); }
  absl::Duration idle_timeout() const { return idle_.timeout(); }
  // Streams `client` has open now (counted only with a per-client limit).
  int64_t open_streams(absl::string_view client) const { return open_.in_flight(client); }
  // Streams finished for idling so far.
  int64_t idled_out() const { return idle_.expired(); }
  // Streams open now (admitted at open, not yet done).
  int64_t open_total() const { return open_total_.load(std::memory_order_relaxed); }

 private:
  friend class StreamHold;

  const bool tokens_verified_;
  ClientShare open_;
  std::atomic<int64_t> open_total_{0};
  RefusalLog log_;
  // Every idle stream waits the same timeout: SendWatch's one thread and
  // ordered tickets are all it takes (re-arming costs a map insert).
  SendWatch idle_;
};

// One stream's part: its place in its client's count, and its idle timer.
// Open, then StartIdle / StopIdle around each wait for a message, from the
// stream's reactor; the expiry runs on the watch's thread.
class StreamHold {
 public:
  // `limits` null: no limits. `rpc` names the stream in messages.
  StreamHold(StreamLimits* limits, absl::string_view rpc);
  ~StreamHold();
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  // At the stream's open: counts it against its client's share. OK (held
  // until Close), or RESOURCE_EXHAUSTED naming the client, its open streams
  // and max_streams_per_client (nothing held).
  absl::Status Open(const grpc::ServerContextBase& context);

  // The stream now waits for its next message (call just before StartRead):
  // unless StopIdle() comes first, `finish` runs once the idle timeout has
  // passed, on the watch's thread, with the status to finish the stream
  // with. At most one armed at a time.
  void StartIdle(absl::AnyInvocable<void(grpc::Status) &&> finish);

  // A read completed (a message, or the end): the timer is disarmed, waiting
  // for a `finish` running now. True when `finish` has run: the stream is
  // being finished already and must not be used further (nor finished
  // again).
  bool StopIdle();

  // The stream is about to be finished (call just before Finish): its place
  // in its client's count and in open_total goes back, so that the client,
  // once it has the stream's status, finds it free. Idempotent; also called
  // on the watch's thread (the idle finish) and by Close.
  void Release();

  // The stream is over (OnDone): the timer is disarmed and its place goes
  // back if Release has not. Idempotent.
  void Close();

 private:
  StreamLimits* const limits_;
  const std::string rpc_;
  std::string client_;
  // Set by Open, cleared by the first Release: Release may run on the
  // watch's thread (the idle finish), and Close later on a reactor's.
  std::atomic<bool> counted_{false};
  SendWatch::Ticket ticket_ = 0;
  std::atomic<bool> idled_out_{false};
};

}  // namespace rope

#endif  // ROPE_SERVICE_STREAM_LIMITS_H_
