#include "server/service/unary_call.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/retry_metadata.h"
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

}  // namespace

UnaryCall::UnaryCall(const AdmissionParts& parts, grpc::CallbackServerContext* context, Rpc rpc,
                     std::string client, int64_t max_reply_bytes)
    : admission_(parts, rpc, std::move(client)), context_(context), reply_limit_(max_reply_bytes) {}

bool UnaryCall::Admit(const google::protobuf::Message& request) {
  absl::Status admitted = admission_.Enter(static_cast<int64_t>(request.ByteSizeLong()));
  if (!admitted.ok()) {
    FinishWith(admitted, nullptr);
    return false;
  }
  return true;
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

void UnaryCall::FinishWith(const absl::Status& status, google::protobuf::Message* response) {
  absl::Status final_status = status;
  int64_t bytes_out = 0;
  if (status.ok() && response != nullptr) {
    bytes_out = static_cast<int64_t>(response->ByteSizeLong());
    final_status = reply_limit_.Check(absl::StrCat(RpcName(admission_.rpc()), " reply"), bytes_out,
                                      "ask for less per call");
    if (!final_status.ok()) {
      response->Clear();
      bytes_out = 0;
    }
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
  auto run = [call, context, response, answer = std::move(answer)]() mutable {
    const absl::Status wanted = call->admission().CheckStillWanted(*context);
    if (!wanted.ok()) {
      call->FinishWith(wanted, nullptr);
      return;
    }
    call->FinishWith(std::move(answer)(), response);
  };
  auto schedule = [call, work = serving.work, run_on = spec.run_on,
                   run = std::move(run)]() mutable {
    if (run_on == RunOn::kThisThread) {
      run();
    } else {
      work->Schedule(std::move(run), call->admission().client());
    }
  };
  if (!spec.more_bytes.has_value()) {
    schedule();
  } else {
    call->ReserveBytes(*spec.more_bytes, absl::FromChrono(context->deadline()),
                       std::move(schedule));
  }
  return call;
}

}  // namespace rope
