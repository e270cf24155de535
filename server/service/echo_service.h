// EchoServiceImpl: rope.bench.v1.EchoService, for benchmarks only.
//
// Answers with the request's payload, moved (not copied) into the reply
// through the same owned-request route Rotate uses, and admitted through the
// same CallGate; the difference between Echo and Rotate latency is then the
// arithmetic and validation. ropeserve registers it only with --enable_echo.
#ifndef ROPE_SERVICE_ECHO_SERVICE_H_
#define ROPE_SERVICE_ECHO_SERVICE_H_

#include <cstdint>

#include "rope/bench/v1/echo.grpc.pb.h"
#include "server/service/call_gate.h"
#include "server/service/owned_messages.h"
#include "server/service/service_metrics.h"

namespace rope {

class EchoServiceImpl final : public bench::v1::EchoService::CallbackService {
 public:
  EchoServiceImpl(CallGate& gate, ServiceMetrics& metrics, int64_t max_message_bytes);

  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const bench::v1::EchoRequest* request,
                                 bench::v1::EchoResponse* response) override;

 private:
  CallGate& gate_;
  ServiceMetrics& metrics_;
  const int64_t max_message_bytes_;
  OwnedMessageAllocator<bench::v1::EchoRequest, bench::v1::EchoResponse> allocator_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_ECHO_SERVICE_H_
