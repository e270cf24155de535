#include "client/grpc_status.h"

#include "absl/strings/str_cat.h"

namespace rope {
namespace client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  if (code < 1 || code > 16) {
    return absl::UnknownError(
        absl::StrCat("grpc status code ", code, ": ", status.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace client
}  // namespace rope
