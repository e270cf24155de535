// UnaryCall: the reactor of every unary RPC of the server, and ServeUnary,
// the skeleton nearly all of them are served by.
//
// A UnaryCall admits its call through a CallAdmission (call_admission.h): a
// gate slot from Admit to FinishWith, its bytes in the ByteBudget from
// ReserveBytes until gRPC has sent the reply (OnDone) or the reply's send
// deadline has cancelled the call; it applies the reply limit and records
// the request's metrics when it finishes. Owned by gRPC
// once returned from a handler; deletes itself in OnDone.
#ifndef ROPE_SERVICE_UNARY_CALL_H_
#define ROPE_SERVICE_UNARY_CALL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/proto_engine/reply_limit.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/call_admission.h"
#include "server/service/work_queue.h"

namespace rope {

class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  // `client` (caller_identity.h; empty: none) is held to its share of the
  // gate. `max_reply_bytes` <= 0 means no check on the reply's size.
  // `context` is the call's.
  UnaryCall(const AdmissionParts& parts, grpc::CallbackServerContext* context, Rpc rpc,
            std::string client, int64_t max_reply_bytes);

  // Takes a gate slot. On refusal finishes the call with the gate's status
  // (UNAVAILABLE or RESOURCE_EXHAUSTED) and returns false; the handler must
  // then only return the reactor. `request` is measured for the metrics and
  // the byte charge.
  bool Admit(const google::protobuf::Message& request);

  // After Admit: charges the request's bytes plus `more_bytes` (what the
  // reply will allocate) to the byte budget, waiting at most until
  // `deadline`; once granted runs `work` (on whichever thread granted: it
  // should only schedule). Refused: finishes the call with the budget's
  // RESOURCE_EXHAUSTED. The bytes are returned in OnDone.
  void ReserveBytes(int64_t more_bytes, absl::Time deadline, absl::AnyInvocable<void() &&> work);

  // Records the metrics and finishes the call with `status` (converted by
  // ToGrpcStatus). An OK reply larger than max_reply_bytes is replaced by
  // RESOURCE_EXHAUSTED naming the limit. A reply with a message gets the
  // send deadline (CallAdmission::WatchSend). Call exactly once, after the
  // last touch of the request; `response` may be null on error.
  void FinishWith(const absl::Status& status, google::protobuf::Message* response);

  const CallAdmission& admission() const { return admission_; }

  void OnDone() override;

 private:
  CallAdmission admission_;
  grpc::CallbackServerContext* const context_;
  const ReplyLimit reply_limit_;
};

// Where an admitted call's answer runs: on the work queue, in its client's
// turn (so that gRPC's few threads stay free for I/O and admission), or on
// the thread that admitted it (cheap calls, and a small CPU-backend Rotate:
// ServiceOptions::inline_rotate_max_bytes).
enum class RunOn { kWorkQueue, kThisThread };

// One unary call, as its admission sees it.
struct UnaryCallSpec {
  Rpc rpc = Rpc::kRotate;
  std::string client;  // caller_identity.h; empty: none
  // What the reply allocates, charged to the byte budget beside the request
  // (CallEstimate::more_bytes). None: the call is not charged at all (calls
  // that allocate nothing worth counting: server information, the region
  // calls), so that a full budget never holds up releasing memory or
  // looking at the server.
  std::optional<int64_t> more_bytes;
  RunOn run_on = RunOn::kWorkQueue;
};

// The server-wide pieces unary calls are served with.
struct UnaryServing {
  AdmissionParts admission;
  WorkQueue* work = nullptr;
  int64_t max_reply_bytes = 0;  // <= 0: unchecked
};

// The skeleton of a unary RPC: admits the call, charges its bytes (waiting
// until the call's deadline at most), then runs `answer` (() ->
// absl::Status, filling `response`) where `spec.run_on` says, unless the
// caller has gone meanwhile (CANCELLED), and finishes the call with its
// status and reply. Echoes gRPC's retry attempt number in a trailer
// (common/retry_metadata.h).
grpc::ServerUnaryReactor* ServeUnary(const UnaryServing& serving,
                                     grpc::CallbackServerContext* context,
                                     const google::protobuf::Message& request, UnaryCallSpec spec,
                                     google::protobuf::Message* response,
                                     absl::AnyInvocable<absl::Status() &&> answer);

}  // namespace rope

#endif  // ROPE_SERVICE_UNARY_CALL_H_
