#include "client/transport_errors.h"

#include <grpc/support/log.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rope {
namespace client {
namespace {

// gRPC's words for a connection that ended before (or during) the handshake.
bool ConnectionCut(absl::string_view message) {
  return absl::StrContains(message, "Socket closed") ||
         absl::StrContains(message, "Connection reset") ||
         absl::StrContains(message, "End of TCP stream") ||
         absl::StrContains(message, "Broken pipe");
}

std::string Cause(absl::string_view message, const ChannelSecurityFiles& security) {
  if (!security.UsesTls()) {
    // A TLS server reads the HTTP/2 preface as a bad TLS record and hangs up.
    if (ConnectionCut(message)) {
      return "the server requires TLS, or is not a gRPC server (give --tls, or --tls_ca_file "
             "for a private CA)";
    }
    return "";
  }
  if (absl::StrContains(message, "WRONG_VERSION_NUMBER") ||
      absl::StrContains(message, "wrong version number") ||
      absl::StrContains(message, "HTTP_REQUEST") ||
      absl::StrContains(message, "packet length too long")) {
    return "the server does not speak TLS (it is plaintext: drop the --tls flags)";
  }
  if (absl::StrContains(message, "CERTIFICATE_VERIFY_FAILED") ||
      absl::StrContains(message, "certificate verify failed")) {
    return "the server's certificate is not signed by a CA the client trusts (check "
           "--tls_ca_file)";
  }
  if (absl::StrContains(message, "not in peer certificate") ||
      absl::StrContains(message, "Peer name")) {
    return "the server's certificate does not name the target host (give --tls_server_name "
           "with a name the certificate holds)";
  }
  if (security.tls_cert_file.empty() &&
      (ConnectionCut(message) || absl::StrContains(message, "CERTIFICATE_REQUIRED") ||
       absl::StrContains(message, "HANDSHAKE_FAILURE"))) {
    return "the server requires a client certificate (mutual TLS: give --tls_cert_file and "
           "--tls_key_file)";
  }
  if (!security.tls_cert_file.empty() &&
      (absl::StrContains(message, "UNKNOWN_CA") || absl::StrContains(message, "BAD_CERTIFICATE") ||
       ConnectionCut(message))) {
    return "the server refused the client certificate (is it signed by the CA the server "
           "trusts, and still valid?)";
  }
  return "";
}

extern "C" void DiscardGrpcLog(gpr_log_func_args* /*args*/) {}

}  // namespace

absl::Status ExplainTransportFailure(const absl::Status& status,
                                     const ChannelSecurityFiles& security) {
  if (status.code() != absl::StatusCode::kUnavailable) return status;
  const std::string cause = Cause(status.message(), security);
  if (cause.empty()) return status;
  return absl::UnavailableError(absl::StrCat(cause, "; gRPC said: ", status.message()));
}

void QuietGrpcLogging() {
  if (std::getenv("GRPC_VERBOSITY") != nullptr || std::getenv("GRPC_TRACE") != nullptr) return;
  gpr_set_log_function(DiscardGrpcLog);
}

}  // namespace client
}  // namespace rope
