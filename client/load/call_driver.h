// CallDriver: sends one request of a Workload without blocking the caller,
// through gRPC's callback API over a ChannelPool, and reports each outcome.
//
//   unary (Rotate, AttentionScores, GetTable): one call per request, with
//     the per-call deadline;
//   RotateStream: one long-lived stream per lane, requests written in order
//     and matched to replies in order; a stream that fails is replaced by a
//     new one at the lane's next request.
//
// Each request serialises its payload (timed) and parses its reply (timed):
// together that is the outcome's client marshal time.
//
// Thread-safe: Issue may be called from any thread, including from inside
// a CallDone. Each lane's requests go to channel lane % pool size.
#ifndef ROPE_CLIENT_LOAD_CALL_DRIVER_H_
#define ROPE_CLIENT_LOAD_CALL_DRIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <google/protobuf/message.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/load/channel_pool.h"
#include "client/load/workload.h"

namespace rope {
namespace load {

struct CallOutcome {
  int payload = 0;                  // the request variant (Workload::variants)
  absl::Time start;                 // latency origin (see Issue)
  absl::Time end;                   // the reply was parsed, or the failure seen
  absl::Duration marshal;           // serialise the request + parse the reply
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;              // the server's (or gRPC's) message when code != OK
  int64_t bytes_sent = 0;           // serialized request
  int64_t bytes_received = 0;       // serialized reply
  // Attempts before the one that answered (gRPC's retries, --max_attempts),
  // as the server reported them (common/retry_metadata.h); 0 when none.
  int retries = 0;
};

// Called exactly once per Issue, on a gRPC thread (or, rarely, inline in
// Issue). `reply` is the parsed reply when outcome.code is OK, else nullptr;
// it lives only during the call.
using CallDone =
    std::function<void(const CallOutcome& outcome, const google::protobuf::Message* reply)>;

class CallDriver {
 public:
  // Precondition for destruction: Live() == 0 (see runner).
  virtual ~CallDriver() = default;

  // Sends request variant `payload` (0 <= payload < Workload::variants())
  // on lane `lane`. `start` is the time latency is
  // measured from: the issue time in a closed loop, the scheduled arrival
  // in an open loop (so that a late send counts against latency).
  virtual void Issue(int lane, int payload, absl::Time start, CallDone done) = 0;

  // Half-closes every stream once its queued writes are out (RotateStream);
  // nothing for unary calls. Later Issues open new streams.
  virtual void CloseStreams() = 0;

  // Cancels every call and stream in flight (their CallDones report
  // CANCELLED).
  virtual void CancelAll() = 0;

  // Calls and streams whose gRPC callbacks have not all finished.
  virtual int64_t Live() const = 0;
};

// `deadline` applies to each unary call; for RotateStream it is the
// deadline of a whole stream from its opening (InfiniteDuration: none).
std::unique_ptr<CallDriver> NewCallDriver(const ChannelPool* pool, const Workload* workload,
                                          absl::Duration deadline);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_CALL_DRIVER_H_
