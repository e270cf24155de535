#include "server/service/call_admission.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rope {

CallAdmission::CallAdmission(const AdmissionParts& parts, Rpc rpc, std::string client)
    : parts_(parts), rpc_(rpc), client_(std::move(client)), start_(absl::Now()) {}

CallAdmission::~CallAdmission() { Done(); }

absl::Status CallAdmission::Enter(int64_t request_bytes) {
  start_ = absl::Now();
  request_bytes_ = request_bytes;
  absl::Status entered = parts_.gate->TryEnter(client_);
  in_gate_ = entered.ok();
  return entered;
}

void CallAdmission::Charge(int64_t more_bytes, absl::Time deadline,
                           absl::AnyInvocable<void(absl::Status) &&> then) {
  if (request_charged_) {
    parts_.budget->TopUp(RpcName(rpc_), client_, bytes_charged_, more_bytes, deadline,
                         [this, more_bytes, then = std::move(then)](absl::Status granted) mutable {
                           if (granted.ok()) bytes_charged_ += std::max<int64_t>(more_bytes, 0);
                           std::move(then)(std::move(granted));
                         });
    return;
  }
  const int64_t held_bytes = request_bytes_;
  parts_.budget->Reserve(RpcName(rpc_), client_, held_bytes, more_bytes, deadline,
                         [this, charged = held_bytes + more_bytes,
                          then = std::move(then)](absl::Status granted) mutable {
                           if (granted.ok()) bytes_charged_ = charged;
                           std::move(then)(std::move(granted));
                         });
}

void CallAdmission::ChargeParse(int64_t parsed_bytes, absl::Time deadline,
                                absl::AnyInvocable<void(absl::Status) &&> then) {
  parts_.budget->ReserveParse(RpcName(rpc_), client_, request_bytes_, parsed_bytes, deadline,
                              [this, wire = std::max<int64_t>(request_bytes_, 0),
                               parsed = std::max<int64_t>(parsed_bytes, 0),
                               then = std::move(then)](absl::Status granted) mutable {
                                if (granted.ok()) {
                                  bytes_charged_ = wire + parsed;
                                  wire_charged_ = wire;
                                  request_charged_ = true;
                                }
                                std::move(then)(std::move(granted));
                              });
}

bool CallAdmission::TryChargeParse(int64_t parsed_bytes) {
  const int64_t wire = std::max<int64_t>(request_bytes_, 0);
  const int64_t parsed = std::max<int64_t>(parsed_bytes, 0);
  if (!parts_.budget->TryReserve(client_, wire + parsed)) return false;
  bytes_charged_ = wire + parsed;
  wire_charged_ = wire;
  request_charged_ = true;
  return true;
}

void CallAdmission::ReturnWireBytes() {
  if (wire_charged_ == 0) return;
  const int64_t wire = wire_charged_;
  wire_charged_ = 0;
  bytes_charged_ -= wire;
  parts_.budget->Release(client_, wire);
}

absl::Status CallAdmission::CheckStillWanted(const grpc::CallbackServerContext& context) const {
  if (!context.IsCancelled()) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat(RpcName(rpc_), " was cancelled (or its deadline passed) before it ran"));
}

void CallAdmission::Record(grpc::StatusCode code, int64_t bytes_out) {
  parts_.metrics->RecordRequest(rpc_, code, absl::Now() - start_, request_bytes_, bytes_out);
}

void CallAdmission::WatchSend(grpc::CallbackServerContext* context) {
  if (parts_.send_watch == nullptr) return;
  send_ticket_ = parts_.send_watch->Arm([context] { context->TryCancel(); });
}

void CallAdmission::LeaveGate() {
  if (!in_gate_) return;
  in_gate_ = false;
  parts_.gate->Leave(client_);
}

void CallAdmission::ReleaseBytes() {
  request_charged_ = false;
  wire_charged_ = 0;
  if (bytes_charged_ == 0) return;
  parts_.budget->Release(client_, bytes_charged_);
  bytes_charged_ = 0;
}

void CallAdmission::Done() {
  if (send_ticket_ != 0) {
    parts_.send_watch->Disarm(send_ticket_);
    send_ticket_ = 0;
  }
  LeaveGate();
  ReleaseBytes();
}

Interrupt InterruptOf(const grpc::CallbackServerContext* context) {
  return Interrupt([context] { return context->IsCancelled(); },
                   absl::FromChrono(context->deadline()));
}

}  // namespace rope
