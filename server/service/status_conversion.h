// The one place where an absl::Status becomes a grpc::Status.
#ifndef ROPE_SERVICE_STATUS_CONVERSION_H_
#define ROPE_SERVICE_STATUS_CONVERSION_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace rope {

// Status messages longer than this are cut (with a marker) before they go on
// the wire: a message travels in a trailer, and an HTTP/2 peer may reject
// oversized header frames, which would replace our status with a transport
// error.
inline constexpr size_t kMaxGrpcStatusMessageBytes = 1024;

// Maps the code 1:1 (absl and gRPC share the canonical code numbers) and
// keeps the message, truncated to kMaxGrpcStatusMessageBytes. Payloads are not
// forwarded.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace rope

#endif  // ROPE_SERVICE_STATUS_CONVERSION_H_
