// The one place where the client turns a grpc::Status into an absl::Status.
// gRPC and absl status codes share their numbering (both follow
// google.rpc.Code), so the code is kept as is, and so is the message.
#ifndef ROPE_CLIENT_GRPC_STATUS_H_
#define ROPE_CLIENT_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace rope {
namespace client {

// OK maps to OK; any other code keeps its value and error_message().
// A code outside google.rpc.Code (0..16) becomes UNKNOWN, with the original
// number in the message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_GRPC_STATUS_H_
