// Options of a RopeClient channel, and the gRPC service config built from
// them (load balancing and the retry policy).
#ifndef ROPE_CLIENT_CLIENT_OPTIONS_H_
#define ROPE_CLIENT_CLIENT_OPTIONS_H_

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/defaults.h"

namespace rope {
namespace client {

struct ClientOptions {
  // Deadline of each unary call, and of a whole RotateStream call.
  absl::Duration deadline = absl::Seconds(30);

  // Channel limits. The server's own limit (GetServerInfo.limits) still
  // applies; these only stop the client from refusing large tensors first.
  int max_send_message_bytes = static_cast<int>(kDefaultMaxMessageBytes);
  int max_receive_message_bytes = static_cast<int>(kDefaultMaxMessageBytes);

  // "round_robin" spreads calls over every address the target resolves to
  // (an "ipv4:127.0.0.1:a,127.0.0.1:b" list, or "dns:///svc:port" over a
  // Kubernetes headless Service); "pick_first" sticks to one.
  std::string load_balancing_policy = "round_robin";

  // Transparent retries of RopeService calls that fail with UNAVAILABLE
  // (a draining or restarting replica, or a connection the server's memory
  // quota sent GOAWAY while a flood filled it), so the call lands on another
  // address or a new connection. 1 disables retrying; gRPC caps this at 5.
  // gRPC waits a random time in [0, backoff] before each retry, the backoff
  // doubling from initial to max: the defaults span up to 1.5 s of waits
  // (0.1 + 0.2 + 0.4 + 0.8), about what a flood of large calls keeps a
  // server's quota full (tests/load/inflight_budget_test.py), where 3
  // attempts from 50 ms spanned 0.15 s and a small call could fail.
  int retry_max_attempts = 5;
  absl::Duration retry_initial_backoff = absl::Milliseconds(100);
  absl::Duration retry_max_backoff = absl::Seconds(1);

  // Client-side health checking: each address is watched through
  // grpc.health.v1 and left out of the rotation while it is not SERVING (a
  // draining replica). Off for a client that asks about health itself
  // (ropectl health), which must reach a NOT_SERVING server to hear it say so.
  bool health_check = true;

  // Whether the channel keeps its connections to itself. gRPC otherwise
  // shares one connection per address among channels created with equal
  // arguments, so N channels would still be one HTTP/2 connection;
  // ropeload --connections=N sets this to get N.
  bool own_connections = false;

  // Channel credentials. nullptr means plaintext (insecure). TLS, mutual TLS
  // and bearer tokens: see channel_security.h.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS: the name the server's certificate must carry, when it differs
  // from the target's host (e.g. connecting by IP address). Empty: the host.
  std::string tls_server_name;
};

// INVALID_ARGUMENT naming the field and value when an option is unusable
// (deadline <= 0, sizes < 1, retry_max_attempts < 1, empty policy, ...).
absl::Status ValidateClientOptions(const ClientOptions& options);

// The JSON service config for `options`: the load-balancing policy, and a
// retryPolicy on every rope.v1.RopeService method retrying UNAVAILABLE
// (omitted when retry_max_attempts is 1). Precondition: options validated.
std::string ServiceConfigJson(const ClientOptions& options);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_CLIENT_OPTIONS_H_
