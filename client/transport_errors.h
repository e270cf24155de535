// Plain-language causes for the common TLS mistakes, and gRPC's own log
// lines kept off a command-line tool's stderr.
//
// gRPC reports most security mistakes alike ("UNAVAILABLE: Socket closed",
// "failed to connect to all addresses"), and logs its handshake errors on
// stderr on top. A tool knows what it offered (plaintext or TLS, with or
// without a client certificate), which with gRPC's message is enough to name
// the likely cause.
#ifndef ROPE_CLIENT_TRANSPORT_ERRORS_H_
#define ROPE_CLIENT_TRANSPORT_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "client/channel_security.h"

namespace rope {
namespace client {

// `status` with the likely cause prepended to its message when it is an
// UNAVAILABLE connection failure that matches a known TLS mistake given
// what the client offered (`security`), e.g. "the server requires TLS (give
// --tls or --tls_ca_file)"; any other status unchanged. The causes:
// plaintext client to a TLS server; TLS client to a plaintext server; TLS
// client without a certificate to a server requiring one; a server
// certificate not trusted, or not naming the target.
absl::Status ExplainTransportFailure(const absl::Status& status,
                                     const ChannelSecurityFiles& security);

// ExplainTransportFailure, and when that finds no cause in a connection
// failure to a name with several addresses (localhost: [::1] and 127.0.0.1),
// asks each address alone: gRPC reports the last address it tried, so an
// IPv4-only TLS server's handshake error hides behind "[::1]: Connection
// refused" in some runs. The first address that answers gives the cause
// ("localhost is [::1] and 127.0.0.1: [::1] refused the connection;
// 127.0.0.1:50051: the server requires TLS ..."). Costs one short call per
// address, only on such a failure.
absl::Status ExplainTransportFailure(const absl::Status& status,
                                     const ChannelSecurityFiles& security,
                                     const std::string& target);

// Turns gRPC's own logging off (its handshake errors would otherwise add
// lines to a tool's one-line error) unless GRPC_VERBOSITY or GRPC_TRACE is
// set in the environment (someone is debugging). Call before any channel.
void QuietGrpcLogging();

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_TRANSPORT_ERRORS_H_
