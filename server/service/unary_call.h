// UnaryCall: the reactor of every unary RPC of ropeserve.
//
// It holds a CallGate slot while the call is being worked on (from Admit to
// FinishWith), and its bytes in flight in the ByteBudget from ReserveBytes
// until gRPC has sent the reply (OnDone), and records the request's metrics
// when it finishes. Owned by gRPC once returned from a handler; deletes itself
// in OnDone.
#ifndef ROPE_SERVICE_UNARY_CALL_H_
#define ROPE_SERVICE_UNARY_CALL_H_

#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/proto_engine/reply_limit.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/byte_budget.h"
#include "server/service/call_gate.h"
#include "server/service/service_metrics.h"

namespace rope {

class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  // `max_reply_bytes` <= 0 means no check on the reply's size.
  UnaryCall(Rpc rpc, CallGate& gate, ServiceMetrics& metrics, int64_t max_reply_bytes);

  // Takes a gate slot. On refusal finishes the call with the gate's status
  // (UNAVAILABLE or RESOURCE_EXHAUSTED) and returns false; the handler must
  // then only return the reactor. `request` is measured for the metrics.
  // `client` (caller_identity.h; empty: none) is held to its per-client
  // share of the gate.
  bool Admit(const google::protobuf::Message& request, std::string client = "");

  // After Admit: charges the request's bytes plus `more_bytes` (what the
  // reply will allocate) to `budget`, waiting at most until `deadline`; once
  // granted runs `work` (on whichever thread granted: it should only
  // schedule). Refused: finishes the call with the budget's
  // RESOURCE_EXHAUSTED. The bytes are returned in OnDone.
  void ReserveBytes(ByteBudget& budget, int64_t more_bytes, absl::Time deadline,
                    absl::AnyInvocable<void() &&> work);

  // Records the metrics and finishes the call with `status` (converted by
  // ToGrpcStatus). An OK reply larger than max_reply_bytes is replaced by
  // RESOURCE_EXHAUSTED naming the limit. Call exactly once, after the last
  // touch of the request; `response` may be null on error.
  void FinishWith(const absl::Status& status, google::protobuf::Message* response);

  void OnDone() override;

 private:
  const Rpc rpc_;
  CallGate& gate_;
  ServiceMetrics& metrics_;
  const ReplyLimit reply_limit_;
  const absl::Time start_;
  int64_t bytes_in_ = 0;
  bool admitted_ = false;
  ByteBudget* budget_ = nullptr;  // set with bytes_charged_ once granted
  int64_t bytes_charged_ = 0;
  std::string client_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_UNARY_CALL_H_
