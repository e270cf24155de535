// CallAdmission: what every request the server answers goes through,
// whatever the call's shape: a unary call (UnaryCall, ServeUnary), each
// message of a stream (AdmittedStream), the region calls, and the KServe
// front end's calls alike:
//   - a CallGate slot, taken when the request arrives: UNAVAILABLE while
//     draining, RESOURCE_EXHAUSTED naming --max_concurrent_calls or the
//     client's share beyond them; held while the request is worked on;
//   - a charge on the ByteBudget before any work: the request's bytes (already
//     resident) and what answering it allocates (CallEstimate::more_bytes),
//     held until its reply has been written, within the client's share of
//     the budget;
//   - the check, just before the work, that the caller still waits, and the
//     Interrupt that lets the work stop when it goes;
//   - the request's metrics;
//   - a send deadline for its reply (send_watch.h): a reply not written in
//     time cancels the call, which returns what it held.
// It sees a request as an Rpc label, a client, byte counts and a status,
// never as a message type.
//
// One per call, reused by a stream for each message in turn. Its steps run
// one after another, though on different threads (not thread-safe).
// Destroying it returns whatever it still holds.
#ifndef ROPE_SERVICE_CALL_ADMISSION_H_
#define ROPE_SERVICE_CALL_ADMISSION_H_

#include <cstdint>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/engine/interrupt.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/service/byte_budget.h"
#include "server/service/call_gate.h"
#include "server/service/send_watch.h"
#include "server/service/service_metrics.h"

namespace rope {

class StreamLimits;

// The server-wide pieces every request is admitted through, owned by the
// server (which outlives its calls). `budget` may be null for a service
// whose calls are never charged (Echo); `send_watch` null: replies have no
// send deadline.
struct AdmissionParts {
  CallGate* gate = nullptr;
  ByteBudget* budget = nullptr;
  ServiceMetrics* metrics = nullptr;
  SendWatch* send_watch = nullptr;
  // What bounds streams between their messages (stream_limits.h); null:
  // nothing beyond the per-connection cap.
  StreamLimits* streams = nullptr;
};

class CallAdmission {
 public:
  // `client` (caller_identity.h; empty: none) is held to its share of the
  // gate and of the byte budget, and names the call's turn in the work
  // queue.
  CallAdmission(const AdmissionParts& parts, Rpc rpc, std::string client);
  ~CallAdmission();
  CallAdmission(const CallAdmission&) = delete;
  CallAdmission& operator=(const CallAdmission&) = delete;

  // A request of `request_bytes` (as received) has arrived: notes when, for
  // the metrics, and takes a gate slot. OK: the slot is held until
  // LeaveGate() or Done(). Otherwise the gate's refusal (UNAVAILABLE while
  // draining, RESOURCE_EXHAUSTED naming the limit), and nothing is held.
  absl::Status Enter(int64_t request_bytes);

  // After Enter: charges the request's bytes plus `more_bytes` (what
  // answering allocates) to the byte budget, waiting until `deadline` at
  // most. `then` runs exactly once, on the thread that granted or refused
  // (it should only schedule): OK, and the bytes are held until
  // ReleaseBytes() or Done(); or the budget's RESOURCE_EXHAUSTED, and no
  // bytes are held. At most one charge at a time.
  // A request that arrived as wire bytes (unary_call.h's raw form) has its
  // request bytes charged earlier, by ChargeParse: Charge then asks only for
  // `more_bytes` on top of what it holds (ByteBudget::TopUp).
  void Charge(int64_t more_bytes, absl::Time deadline,
              absl::AnyInvocable<void(absl::Status) &&> then);

  // After Enter, for a request not parsed yet: charges its wire bytes
  // (resident) plus `parsed_bytes` (ParsedSizeBound: what parsing it
  // allocates), waiting until `deadline` at most, before the parse. `then`
  // as for Charge. The parsed bytes are held until ReleaseBytes() or
  // Done(); the wire bytes until ReturnWireBytes().
  void ChargeParse(int64_t parsed_bytes, absl::Time deadline,
                   absl::AnyInvocable<void(absl::Status) &&> then);
  // ChargeParse's charge when it fits now (true), else nothing (false).
  bool TryChargeParse(int64_t parsed_bytes);
  // The request's wire bytes have been freed (it is parsed): they go back
  // to the budget, the parsed bytes stay. Idempotent.
  void ReturnWireBytes();

  // Just before the work: OK while the caller waits; CANCELLED naming the
  // RPC once it cancelled, went away or its deadline passed (gRPC marks the
  // call cancelled then).
  absl::Status CheckStillWanted(const grpc::CallbackServerContext& context) const;

  // Records the request in hand as answered with `code`, its reply being
  // `bytes_out` long (0 for an error).
  void Record(grpc::StatusCode code, int64_t bytes_out);

  // Just before a reply is sent: if it has not been written within the send
  // deadline, the call is cancelled (gRPC then ends it: OnDone, or a failed
  // OnWriteDone). Until Done(), which disarms it. At most one at a time.
  void WatchSend(grpc::CallbackServerContext* context);

  // The work is done: the slot goes back (the bytes stay until the reply
  // has been written). Idempotent.
  void LeaveGate();
  // The reply has been written (or never will be): the bytes go back.
  // Idempotent.
  void ReleaseBytes();
  // The reply has been written, or the call is over: the send deadline is
  // disarmed, the slot and the bytes go back; the request in hand holds
  // nothing any more.
  void Done();

  Rpc rpc() const { return rpc_; }
  const std::string& client() const { return client_; }
  int64_t request_bytes() const { return request_bytes_; }
  absl::Time start() const { return start_; }

 private:
  const AdmissionParts parts_;
  const Rpc rpc_;
  const std::string client_;
  absl::Time start_;
  int64_t request_bytes_ = 0;
  bool in_gate_ = false;
  int64_t bytes_charged_ = 0;
  // Charged by ChargeParse: the request's bytes are in bytes_charged_, and
  // its wire bytes (wire_charged_) until ReturnWireBytes.
  bool request_charged_ = false;
  int64_t wire_charged_ = 0;
  SendWatch::Ticket send_ticket_ = 0;
};

// Stops a call's work when its caller goes or its deadline passes: what the
// backends and the config parser poll. `context` must outlive it.
Interrupt InterruptOf(const grpc::CallbackServerContext* context);

}  // namespace rope

#endif  // ROPE_SERVICE_CALL_ADMISSION_H_
