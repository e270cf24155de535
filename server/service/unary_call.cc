#include "server/service/unary_call.h"

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/retry_metadata.h"
#include "google/protobuf/descriptor.h"
#include "server/service/raw_message.h"
#include "server/service/status_conversion.h"

namespace rope {
namespace {

// Echoes the attempt number gRPC's retries send to the server back to the
// client in a trailer (common/retry_metadata.h), so that it can count them.
void EchoPreviousAttempts(grpc::CallbackServerContext* context) {
  const std::multimap<grpc::string_ref, grpc::string_ref>& metadata = context->client_metadata();
  auto it = metadata.find(kGrpcPreviousAttemptsHeader);
  if (it == metadata.end()) return;
  context->AddTrailingMetadata(kPreviousAttemptsTrailer,
                               std::string(it->second.data(), it->second.size()));
}

// Charges `more_bytes` (none: nothing) on top of what `call` holds, then
// runs `answer` where `run_on` says unless the caller has gone (then
// `not_run`, if any), and finishes the call with its status and `response`.
// `writer`, when set, writes an OK reply instead of `response`.
void ChargeAndRun(UnaryCall* call, WorkQueue* work, grpc::CallbackServerContext* context,
                  std::optional<int64_t> more_bytes, RunOn run_on,
                  google::protobuf::Message* response, absl::AnyInvocable<absl::Status() &&> answer,
                  absl::AnyInvocable<void() &&> not_run, std::unique_ptr<ReplyWriter> writer) {
  auto run = [call, context, response, writer = std::move(writer), answer = std::move(answer),
              not_run = std::move(not_run)]() mutable {
    const absl::Status wanted = call->admission().CheckStillWanted(*context);
    if (!wanted.ok()) {
      if (not_run) std::move(not_run)();
      call->FinishWith(wanted, nullptr);
      return;
    }
    const absl::Status answered = std::move(answer)();
    call->FinishWith(answered, response, writer.get());
  };
  auto schedule = [call, work, run_on, run = std::move(run)]() mutable {
    if (run_on == RunOn::kThisThread) {
      run();
    } else {
      work->Schedule(std::move(run), call->admission().client());
    }
  };
  if (!more_bytes.has_value()) {
    schedule();
  } else {
    call->ReserveBytes(*more_bytes, absl::FromChrono(context->deadline()), std::move(schedule));
  }
}

// Step 3 of ServeRawUnary: parses the admitted (and charged) wire bytes
// into the call's request, frees them, and hands the request to `plan`.
void ParseAndPlan(UnaryCall* call, WorkQueue* work, grpc::CallbackServerContext* context,
                  const grpc::ByteBuffer* request_wire, PlanUnary plan) {
  google::protobuf::Message* request = call->request();
  const int64_t request_bytes = call->admission().request_bytes();
  const std::string* detached = call->detached_wire();
  const bool parsed =
      detached != nullptr ? request->ParseFromString(*detached) : ParseWire(*request_wire, request);
  if (detached != nullptr) call->FreeDetachedWire();
  // gRPC owns the request buffer (mutable, in the call's message holder)
  // until the call is over; its own typed parse frees the bytes right
  // after parsing, and so does this one: the wire bytes go back to the
  // budget now, the parsed ones stay charged until the call is over.
  const_cast<grpc::ByteBuffer*>(request_wire)->Clear();
  call->admission().ReturnWireBytes();
  if (!parsed) {
    call->FinishWith(NotParsedError(*request->GetDescriptor(), request_bytes), nullptr);
    return;
  }
  absl::StatusOr<UnaryWork> planned = std::move(plan)(request, call->response(), request_bytes);
  if (!planned.ok()) {
    call->FinishWith(planned.status(), nullptr);
    return;
  }
  ChargeAndRun(call, work, context, planned->more_bytes, planned->run_on, call->response(),
               std::move(planned->answer), std::move(planned->not_run), std::move(planned->reply));
}

}  // namespace

UnaryCall::UnaryCall(const AdmissionParts& parts, grpc::CallbackServerContext* context, Rpc rpc,
                     std::string client, int64_t max_reply_bytes)
    : admission_(parts, rpc, std::move(client)), context_(context), reply_limit_(max_reply_bytes) {}

bool UnaryCall::Admit(const google::protobuf::Message& request) {
  return Admit(static_cast<int64_t>(request.ByteSizeLong()));
}

bool UnaryCall::Admit(int64_t request_bytes) {
  absl::Status admitted = admission_.Enter(request_bytes);
  if (!admitted.ok()) {
    FinishWith(admitted, nullptr);
    return false;
  }
  return true;
}

void UnaryCall::DetachWire(const grpc::ByteBuffer* request_wire) {
  detached_wire_ = CopyWire(*request_wire);
  // See ParseAndPlan on clearing gRPC's request buffer.
  const_cast<grpc::ByteBuffer*>(request_wire)->Clear();
  wire_detached_ = true;
}

void UnaryCall::Own(std::unique_ptr<google::protobuf::Message> request,
                    std::unique_ptr<google::protobuf::Message> response,
                    grpc::ByteBuffer* reply_wire) {
  request_ = std::move(request);
  response_ = std::move(response);
  reply_wire_ = reply_wire;
}

void UnaryCall::ReserveBytes(int64_t more_bytes, absl::Time deadline,
                             absl::AnyInvocable<void() &&> work) {
  admission_.Charge(more_bytes, deadline,
                    [this, work = std::move(work)](absl::Status granted) mutable {
                      if (!granted.ok()) {
                        FinishWith(granted, nullptr);
                        return;
                      }
                      std::move(work)();
                    });
}

void UnaryCall::FinishWith(const absl::Status& status, google::protobuf::Message* response,
                           ReplyWriter* writer) {
  absl::Status final_status = status;
  int64_t bytes_out = 0;
  // Only a raw call has a buffer for a writer to write into.
  if (reply_wire_ == nullptr) writer = nullptr;
  if (status.ok() && writer != nullptr) {
    bytes_out = writer->ReplyBytes();
    final_status = reply_limit_.Check(absl::StrCat(RpcName(admission_.rpc()), " reply"), bytes_out,
                                      "ask for less per call");
    if (final_status.ok()) final_status = writer->WriteReply(reply_wire_);
    if (!final_status.ok()) bytes_out = 0;
  } else if (status.ok() && response != nullptr) {
    bytes_out = static_cast<int64_t>(response->ByteSizeLong());
    final_status = reply_limit_.Check(absl::StrCat(RpcName(admission_.rpc()), " reply"), bytes_out,
                                      "ask for less per call");
    if (!final_status.ok()) {
      response->Clear();
      bytes_out = 0;
    }
  }
  if (reply_wire_ != nullptr) {
    if (final_status.ok() && response != nullptr && writer == nullptr) {
      // Its size is cached by the check above: one pass, into one slice.
      final_status = SerializeReply(*response, absl::StrCat(RpcName(admission_.rpc()), " reply"),
                                    reply_wire_);
      if (!final_status.ok()) bytes_out = 0;
    }
    // The request and the reply message are not touched again: freed now
    // (their bytes stay charged until OnDone, with the serialized reply's).
    request_.reset();
    response_.reset();
  }
  grpc::Status grpc_status = ToGrpcStatus(final_status);
  admission_.Record(grpc_status.error_code(), bytes_out);
  // The work is done: free the slot now rather than in OnDone, which gRPC
  // runs only once the reply is acknowledged and which lags far behind under
  // CPU load (refusing calls a client sees as long finished). A drain still
  // waits for the reply: Shutdown(deadline) lets pending sends complete.
  admission_.LeaveGate();
  // Armed before Finish: OnDone (which disarms it) may run as soon as
  // Finish is called.
  if (bytes_out > 0) admission_.WatchSend(context_);
  Finish(std::move(grpc_status));
}

void UnaryCall::OnDone() {
  // The request and the reply (and its serialized copy) are freed only now:
  // the admission returns their bytes (and a slot FinishWith never freed).
  admission_.Done();
  delete this;
}

grpc::ServerUnaryReactor* ServeUnary(const UnaryServing& serving,
                                     grpc::CallbackServerContext* context,
                                     const google::protobuf::Message& request, UnaryCallSpec spec,
                                     google::protobuf::Message* response,
                                     absl::AnyInvocable<absl::Status() &&> answer) {
  EchoPreviousAttempts(context);
  auto* call = new UnaryCall(serving.admission, context, spec.rpc, std::move(spec.client),
                             serving.max_reply_bytes);
  if (!call->Admit(request)) return call;
  ChargeAndRun(call, serving.work, context, spec.more_bytes, spec.run_on, response,
               std::move(answer), nullptr, nullptr);
  return call;
}

grpc::ServerUnaryReactor* ServeRawUnary(const UnaryServing& serving,
                                        grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request_wire,
                                        grpc::ByteBuffer* reply_wire, RawUnarySpec spec,
                                        std::unique_ptr<google::protobuf::Message> request,
                                        std::unique_ptr<google::protobuf::Message> response,
                                        PlanUnary plan) {
  EchoPreviousAttempts(context);
  auto* call = new UnaryCall(serving.admission, context, spec.rpc, std::move(spec.client),
                             serving.max_reply_bytes);
  const google::protobuf::Descriptor& type = *request->GetDescriptor();
  call->Own(std::move(request), std::move(response), reply_wire);
  if (!call->Admit(static_cast<int64_t>(request_wire->Length()))) return call;
  // What the parse will allocate, read from the wire bytes without parsing
  // them; malformed bytes are refused here, as the parse would refuse them.
  const absl::StatusOr<int64_t> parsed_bytes = ParsedBoundOf(type, *request_wire);
  if (!parsed_bytes.ok()) {
    call->FinishWith(parsed_bytes.status(), nullptr);
    return call;
  }
  auto parse = [call, work = serving.work, context, request_wire,
                plan = std::move(plan)]() mutable {
    ParseAndPlan(call, work, context, request_wire, std::move(plan));
  };
  if (!spec.charged || call->admission().TryChargeParse(*parsed_bytes)) {
    parse();
    return call;
  }
  // It must wait for room (or be refused). Unless it is refused for being
  // larger than the whole budget, its wire bytes leave gRPC's buffer
  // meanwhile: see DetachWire.
  const int64_t budget_bytes = serving.admission.budget->budget_bytes();
  if (budget_bytes <= 0 || call->admission().request_bytes() + *parsed_bytes <= budget_bytes) {
    call->DetachWire(request_wire);
  }
  call->admission().ChargeParse(*parsed_bytes, absl::FromChrono(context->deadline()),
                                [call, parse = std::move(parse)](absl::Status granted) mutable {
                                  if (!granted.ok()) {
                                    call->FinishWith(granted, nullptr);
                                    return;
                                  }
                                  parse();
                                });
  return call;
}

}  // namespace rope
