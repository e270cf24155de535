#include "server/service/echo_service.h"

#include "absl/status/status.h"
#include "server/service/unary_call.h"

namespace rope {

EchoServiceImpl::EchoServiceImpl(CallGate& gate, ServiceMetrics& metrics,
                                 int64_t max_message_bytes)
    : gate_(gate), metrics_(metrics), max_message_bytes_(max_message_bytes) {
  SetMessageAllocatorFor_Echo(&allocator_);
}

grpc::ServerUnaryReactor* EchoServiceImpl::Echo(grpc::CallbackServerContext* context,
                                                const bench::v1::EchoRequest* request,
                                                bench::v1::EchoResponse* response) {
  // Admitted as every call; never charged to the byte budget.
  auto* call = new UnaryCall(AdmissionParts{&gate_, nullptr, &metrics_}, context, Rpc::kEcho,
                             /*client=*/"", max_message_bytes_);
  if (!call->Admit(*request)) return call;
  auto* owned = MutableRequest<bench::v1::EchoRequest, bench::v1::EchoResponse>(context);
  if (owned == nullptr) {
    call->FinishWith(absl::InternalError("Echo: the owning message allocator is not installed"),
                     nullptr);
    return call;
  }
  // No work worth a thread hop: answered on the gRPC thread.
  response->set_dtype(owned->dtype());
  response->mutable_shape()->Swap(owned->mutable_shape());
  response->mutable_data()->swap(*owned->mutable_data());
  call->FinishWith(absl::OkStatus(), response);
  return call;
}

}  // namespace rope
