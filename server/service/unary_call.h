// UnaryCall: the reactor of every unary RPC of the server, and ServeUnary,
// the skeleton nearly all of them are served by.
//
// A UnaryCall admits its call through a CallAdmission (call_admission.h): a
// gate slot from Admit to FinishWith, its bytes in the ByteBudget from
// ReserveBytes until gRPC has sent the reply (OnDone) or the reply's send
// deadline has cancelled the call; it applies the reply limit and records
// the request's metrics when it finishes. Owned by gRPC
// once returned from a handler; deletes itself in OnDone.
//
// ServeRawUnary is its form for methods registered raw (gRPC hands the
// handler the request's wire bytes): the request is parsed only once it is
// admitted and the memory its parse allocates is charged.
#ifndef ROPE_SERVICE_UNARY_CALL_H_
#define ROPE_SERVICE_UNARY_CALL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/proto_engine/reply_limit.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/call_admission.h"
#include "server/service/reply_writer.h"
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
  // The same for a request of `request_bytes` not parsed yet.
  bool Admit(int64_t request_bytes);

  // A raw call's messages: owned by the call from now on, the request freed
  // when the call finishes (FinishWith), the reply once serialized into
  // `reply_wire` (gRPC's response buffer) by FinishWith.
  void Own(std::unique_ptr<google::protobuf::Message> request,
           std::unique_ptr<google::protobuf::Message> response, grpc::ByteBuffer* reply_wire);
  google::protobuf::Message* request() { return request_.get(); }
  // A raw call that must wait for its parse's charge: copies the request's
  // wire bytes out of gRPC's buffer (whose slices gRPC's resource quota
  // counts, and reclaims under pressure by resetting calls) and frees it.
  void DetachWire(const grpc::ByteBuffer* request_wire);
  // The copy DetachWire made, or null when it was not called.
  const std::string* detached_wire() const { return wire_detached_ ? &detached_wire_ : nullptr; }
  void FreeDetachedWire() { std::string().swap(detached_wire_); }
  google::protobuf::Message* response() { return response_.get(); }

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
  // A raw call's OK reply may come from `writer` instead of `response`
  // (ReplyWriter: its size checked against the limit before its bytes are
  // written into gRPC's reply buffer).
  void FinishWith(const absl::Status& status, google::protobuf::Message* response,
                  ReplyWriter* writer = nullptr);

  const CallAdmission& admission() const { return admission_; }
  CallAdmission& admission() { return admission_; }

  void OnDone() override;

 private:
  CallAdmission admission_;
  grpc::CallbackServerContext* const context_;
  const ReplyLimit reply_limit_;
  // A raw call's (Own): its messages and gRPC's buffer for the reply.
  std::unique_ptr<google::protobuf::Message> request_;
  std::unique_ptr<google::protobuf::Message> response_;
  grpc::ByteBuffer* reply_wire_ = nullptr;
  bool wire_detached_ = false;
  std::string detached_wire_;
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

// What a raw call does, known once its request is parsed.
struct UnaryWork {
  // As UnaryCallSpec::more_bytes: what the reply allocates, charged on top
  // of the parsed request; none: nothing more is charged.
  std::optional<int64_t> more_bytes;
  RunOn run_on = RunOn::kWorkQueue;
  // () -> absl::Status, filling the reply.
  absl::AnyInvocable<absl::Status() &&> answer;
  // Runs instead of `answer` when the caller went before the work ran
  // (optional).
  absl::AnyInvocable<void() &&> not_run;
  // When set, an OK answer's reply is written by it (reply_writer.h), not
  // serialized from the reply message. Held until the call is finished, so
  // `answer` may fill it through a plain pointer.
  std::unique_ptr<ReplyWriter> reply;
};

// A raw call as its admission sees it before the parse.
struct RawUnarySpec {
  Rpc rpc = Rpc::kRotate;
  std::string client;  // caller_identity.h; empty: none
  // Whether the request's bytes (wire and parsed) are charged to the byte
  // budget. Calls never charged (UnaryCallSpec::more_bytes none) say false.
  bool charged = true;
};

// Turns a parsed request into its work: (request, reply, the request's
// wire bytes) -> UnaryWork, or a status that finishes the call (the
// request's own errors: validation comes before the reply's charge).
using PlanUnary = absl::AnyInvocable<absl::StatusOr<UnaryWork>(google::protobuf::Message* request,
                                                               google::protobuf::Message* response,
                                                               int64_t request_bytes) &&>;

// The skeleton of a unary RPC registered raw (WithRawCallbackMethod_X):
//   1. admits the call with its wire size (gate slot);
//   2. bounds what parsing the wire bytes allocates (ParsedSizeBound, no
//      parse; malformed bytes: INVALID_ARGUMENT naming the message type)
//      and charges wire + that bound, waiting until the call's deadline at
//      most (spec.charged); a call that has to wait first copies its wire
//      bytes out of gRPC's buffer (DetachWire);
//   3. parses them into `request` (a fresh message of the method's request
//      type; a parse failure, e.g. a string that is not UTF-8, is
//      INVALID_ARGUMENT naming the type), then frees the wire bytes and
//      returns their charge: the parsed bytes stay charged until the call
//      is over;
//   4. runs `plan` on the parsed request, charges its more_bytes on top,
//      and runs its answer as ServeUnary does;
//   5. serializes the reply into `reply_wire` (the reply limit checked
//      first), freeing the reply message; or has the work's ReplyWriter
//      write it there (the limit checked against its size first).
// Steps 3 and 4 run on the thread that granted the charge (a gRPC thread:
// this one, or the one whose call released the bytes).
grpc::ServerUnaryReactor* ServeRawUnary(const UnaryServing& serving,
                                        grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request_wire,
                                        grpc::ByteBuffer* reply_wire, RawUnarySpec spec,
                                        std::unique_ptr<google::protobuf::Message> request,
                                        std::unique_ptr<google::protobuf::Message> response,
                                        PlanUnary plan);

// The same with typed messages: `plan` is (Request*, Response*, int64_t
// request_bytes) -> absl::StatusOr<UnaryWork>.
template <typename Request, typename Response, typename Plan>
grpc::ServerUnaryReactor* ServeRawUnary(const UnaryServing& serving,
                                        grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request_wire,
                                        grpc::ByteBuffer* reply_wire, RawUnarySpec spec,
                                        Plan plan) {
  return ServeRawUnary(serving, context, request_wire, reply_wire, std::move(spec),
                       std::make_unique<Request>(), std::make_unique<Response>(),
                       [plan = std::move(plan)](
                           google::protobuf::Message* request, google::protobuf::Message* response,
                           int64_t request_bytes) mutable -> absl::StatusOr<UnaryWork> {
                         return std::move(plan)(static_cast<Request*>(request),
                                                static_cast<Response*>(response), request_bytes);
                       });
}

}  // namespace rope

#endif  // ROPE_SERVICE_UNARY_CALL_H_
