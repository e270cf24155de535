// A gRPC message allocator that lets a unary handler own its request.
//
// The callback API hands a handler `const Request*`. Rotate wants to rotate
// the request's tensor bytes in place and then move them into the reply, with
// no copy of the payload. Installing OwnedMessageAllocator on a method
// (Service::SetMessageAllocatorFor_<Method>) makes every call's messages
// members of an OwnedMessages object that the call's context exposes through
// GetRpcAllocatorState(); MutableRequest() returns the request from there.
// gRPC releases the holder after the reactor's OnDone, so the request stays
// valid until the call is finished.
#ifndef ROPE_SERVICE_OWNED_MESSAGES_H_
#define ROPE_SERVICE_OWNED_MESSAGES_H_

#include "grpcpp/server_context.h"
#include "grpcpp/support/message_allocator.h"

namespace rope {

template <typename Request, typename Response>
class OwnedMessages final : public grpc::MessageHolder<Request, Response> {
 public:
  OwnedMessages() {
    this->set_request(&request_);
    this->set_response(&response_);
  }
  void Release() override { delete this; }
  Request* mutable_request() { return &request_; }

 private:
  Request request_;
  Response response_;
};

// Stateless and thread-safe; must outlive the server it is installed on.
template <typename Request, typename Response>
class OwnedMessageAllocator final : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    return new OwnedMessages<Request, Response>();
  }
};

// The mutable request of the current call, or nullptr when the method's
// allocator is not an OwnedMessageAllocator<Request, Response>.
template <typename Request, typename Response>
Request* MutableRequest(grpc::CallbackServerContext* context) {
  auto* owned = dynamic_cast<OwnedMessages<Request, Response>*>(context->GetRpcAllocatorState());
  return owned == nullptr ? nullptr : owned->mutable_request();
}

}  // namespace rope

#endif  // ROPE_SERVICE_OWNED_MESSAGES_H_
