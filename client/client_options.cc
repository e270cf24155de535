#include "client/client_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rope {
namespace client {
namespace {

// gRPC durations in a service config are decimal seconds with an "s".
std::string JsonDuration(absl::Duration d) {
  return absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d));
}

}  // namespace

absl::Status ValidateClientOptions(const ClientOptions& options) {
  if (options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.deadline is ", absl::FormatDuration(options.deadline), ": must be > 0"));
  }
  if (options.max_send_message_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.max_send_message_bytes is ",
                                                   options.max_send_message_bytes,
                                                   ": must be >= 1"));
  }
  if (options.max_receive_message_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.max_receive_message_bytes is ",
                                                   options.max_receive_message_bytes,
                                                   ": must be >= 1"));
  }
  if (options.load_balancing_policy.empty()) {
    return absl::InvalidArgumentError("ClientOptions.load_balancing_policy is empty");
  }
  for (char c : options.load_balancing_policy) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return absl::InvalidArgumentError(
          absl::StrCat("ClientOptions.load_balancing_policy is '", options.load_balancing_policy,
                       "': expected a policy name such as round_robin or pick_first"));
    }
  }
  if (options.retry_max_attempts < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.retry_max_attempts is ",
                                                   options.retry_max_attempts,
                                                   ": must be >= 1 (1 = no retry)"));
  }
  if (options.retry_max_attempts > 1 &&
      (options.retry_initial_backoff <= absl::ZeroDuration() ||
       options.retry_max_backoff < options.retry_initial_backoff)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.retry_initial_backoff is ",
        absl::FormatDuration(options.retry_initial_backoff), " and retry_max_backoff is ",
        absl::FormatDuration(options.retry_max_backoff), ": need 0 < initial <= max"));
  }
  if (!options.tls_server_name.empty() && options.credentials == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.tls_server_name is \"",
                                                   options.tls_server_name,
                                                   "\" but the channel is plaintext"));
  }
  return absl::OkStatus();
}

std::string ServiceConfigJson(const ClientOptions& options) {
  std::string json = absl::StrCat(R"({"loadBalancingConfig":[{")",
                                  options.load_balancing_policy, R"(":{}}])");
  // Client-side health checking (grpc.health.v1 Watch on each address): a
  // draining server turns NOT_SERVING and leaves the rotation before it
  // closes its connections. Servers without the health service count as
  // healthy (gRPC treats UNIMPLEMENTED so).
  if (options.health_check) absl::StrAppend(&json, R"(,"healthCheckConfig":{"serviceName":""})");
  if (options.retry_max_attempts > 1) {
    absl::StrAppend(&json, R"(,"methodConfig":[{"name":[{"service":"rope.v1.RopeService"}],)",
                    R"("retryPolicy":{"maxAttempts":)", options.retry_max_attempts,
                    R"(,"initialBackoff":")", JsonDuration(options.retry_initial_backoff),
                    R"(","maxBackoff":")", JsonDuration(options.retry_max_backoff),
                    R"(","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}])");
  }
  json += "}";
  return json;
}

}  // namespace client
}  // namespace rope
