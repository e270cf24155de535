#include "server/service/unary_call.h"

#include "absl/strings/str_cat.h"
#include "server/service/status_conversion.h"

namespace rope {

UnaryCall::UnaryCall(Rpc rpc, CallGate& gate, ServiceMetrics& metrics, int64_t max_reply_bytes)
    : rpc_(rpc),
      gate_(gate),
      metrics_(metrics),
      reply_limit_(max_reply_bytes),
      start_(absl::Now()) {}

bool UnaryCall::Admit(const google::protobuf::Message& request, std::string client) {
  bytes_in_ = static_cast<int64_t>(request.ByteSizeLong());
  client_ = std::move(client);
  absl::Status admitted = gate_.TryEnter(client_);
  if (!admitted.ok()) {
    FinishWith(admitted, nullptr);
    return false;
  }
  admitted_ = true;
  return true;
}

void UnaryCall::ReserveBytes(ByteBudget& budget, int64_t more_bytes, absl::Time deadline,
                             absl::AnyInvocable<void() &&> work) {
  const int64_t held_bytes = bytes_in_;
  budget.Reserve(RpcName(rpc_), held_bytes, more_bytes, deadline,
                 [this, &budget, held_bytes, more_bytes,
                  work = std::move(work)](absl::Status granted) mutable {
                   if (!granted.ok()) {
                     FinishWith(granted, nullptr);
                     return;
                   }
                   budget_ = &budget;
                   bytes_charged_ = held_bytes + more_bytes;
                   std::move(work)();
                 });
}

void UnaryCall::FinishWith(const absl::Status& status, google::protobuf::Message* response) {
  absl::Status final_status = status;
  int64_t bytes_out = 0;
  if (status.ok() && response != nullptr) {
    bytes_out = static_cast<int64_t>(response->ByteSizeLong());
    final_status = reply_limit_.Check(absl::StrCat(RpcName(rpc_), " reply"), bytes_out,
                                      "ask for less per call");
    if (!final_status.ok()) {
      response->Clear();
      bytes_out = 0;
    }
  }
  grpc::Status grpc_status = ToGrpcStatus(final_status);
  metrics_.RecordRequest(rpc_, grpc_status.error_code(), absl::Now() - start_, bytes_in_,
                         bytes_out);
  // The work is done: free the slot now rather than in OnDone, which gRPC
  // runs only once the reply is acknowledged and which lags far behind under
  // CPU load (refusing calls a client sees as long finished). A drain still
  // waits for the reply: Shutdown(deadline) lets pending sends complete.
  if (admitted_) {
    admitted_ = false;
    gate_.Leave(client_);
  }
  Finish(std::move(grpc_status));
}

void UnaryCall::OnDone() {
  if (admitted_) gate_.Leave(client_);  // never reached FinishWith
  // The request and the reply (and its serialized copy) are freed only now.
  if (budget_ != nullptr) budget_->Release(bytes_charged_);
  delete this;
}

}  // namespace rope
